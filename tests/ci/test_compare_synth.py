"""`.ci/compare_synth.py compare`: byte for byte, and tree.json read as the construct tree (each check
with a broken input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ci import ci_script

compare_synth = ci_script("compare_synth")


def _tree(*paths: str) -> str:
    root: dict[str, object] = {"id": "App", "path": "", "children": {}}
    for path in paths:
        node = root
        for i, part in enumerate(path.split("/")):
            children = node.setdefault("children", {})
            assert isinstance(children, dict)
            node = children.setdefault(
                part, {"id": part, "path": "/".join(path.split("/")[: i + 1]), "constructInfo": {"fqn": "constructs.Construct"}}
            )
    return json.dumps({"version": "tree-0.1", "tree": root})


def _assembly(folder: Path, template: str, tree: str) -> Path:
    (folder / "asset.abc").mkdir(parents=True)
    (folder / "asset.abc" / "index.py").write_text("print('hi')\n")
    (folder / "dev.template.json").write_text(template)
    (folder / "tree.json").write_text(tree)
    return folder


@pytest.fixture
def before(tmp_path: Path) -> Path:
    return _assembly(tmp_path / "before", '{"Resources": {}}', _tree("dev/Compute/HyperPod/Resource"))


def test_identical_folders_pass(tmp_path: Path, before: Path) -> None:
    after = _assembly(tmp_path / "after", '{"Resources": {}}', _tree("dev/Compute/HyperPod/Resource"))
    assert compare_synth.compare(after, before) == 0


def test_a_changed_template_or_asset_fails(tmp_path: Path, before: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _assembly(tmp_path / "after", '{"Resources": {"X": {}}}', _tree("dev/Compute/HyperPod/Resource"))
    (after / "asset.abc" / "index.py").write_text("print('bye')\n")
    assert compare_synth.compare(after, before, allow_empty_constructs=True) == 1
    out = capsys.readouterr().out
    assert "different: dev.template.json" in out and "different: asset.abc/index.py" in out


def test_an_empty_construct_added_passes_only_when_allowed(tmp_path: Path, before: Path, capsys: pytest.CaptureFixture[str]) -> None:
    after = _assembly(tmp_path / "after", '{"Resources": {}}', _tree("dev/Compute/HyperPod/Resource", "dev/Compute/Clusters"))
    assert compare_synth.compare(after, before) == 1
    assert "+ construct dev/Compute/Clusters (constructs.Construct)" in capsys.readouterr().out
    assert compare_synth.compare(after, before, allow_empty_constructs=True) == 0


def test_a_moved_resource_fails_even_when_allowed(tmp_path: Path, before: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A resource under the new construct changes its path (and, unless the id is Default, its logical id)."""
    after = _assembly(tmp_path / "after", '{"Resources": {}}', _tree("dev/Compute/Clusters/HyperPod/Resource"))
    assert compare_synth.compare(after, before, allow_empty_constructs=True) == 1
    out = capsys.readouterr().out
    assert "- construct dev/Compute/HyperPod/Resource" in out and "+ construct dev/Compute/Clusters/HyperPod" in out
