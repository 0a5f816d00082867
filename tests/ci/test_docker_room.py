"""`.ci/docker_room.py`: room on the deploy runner for the container images `cdk deploy` builds (serving read 3, A1)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT


def _room() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docker_room", ROOT / ".ci" / "docker_room.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_serving_example_builds_an_image_and_the_shipped_environments_none(synth: Any) -> None:
    room = _room()
    assert len(room.image_assets(synth.outdir, "serve")) == 1  # the EFA build for chat-405b
    for env in ("dev", "staging", "prod"):
        assert room.image_assets(synth.outdir, env) == []


@pytest.mark.parametrize(
    ("images", "root", "spare", "verdict"),
    [
        ([], 1.0, None, "none"),
        (["a"], 50.0, 66.0, "ok"),
        (["a"], 19.0, 66.0, "move"),  # a hosted runner's root and /mnt (docs/facts/pipeline.md#github-runner-disk)
        (["a"], 19.0, None, "short"),
        (["a"], 19.0, 30.0, "short"),
    ],
)
def test_the_decision(images: list[str], root: float, spare: float | None, verdict: str) -> None:
    assert _room().decide(images, root, spare) == verdict


def test_no_room_is_one_line_and_a_failed_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    room = _room()
    folder = tmp_path / "assembly-serve"
    folder.mkdir()
    (folder / "serveCompute.assets.json").write_text(json.dumps({"dockerImages": {"abc": {}}}))
    monkeypatch.setattr(room, "_docker_root", lambda: tmp_path)
    monkeypatch.setattr(room, "_free_gib", lambda path: 10.0)
    monkeypatch.setattr(room, "SPARE", tmp_path / "no-such-disk")
    assert room.main(["--app", str(tmp_path), "--environment", "serve"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deploy it from a larger or self-hosted runner" in err
    moved: list[Path] = []
    monkeypatch.setattr(room, "SPARE", tmp_path)
    monkeypatch.setattr(room, "_free_gib", lambda path: 66.0 if path == tmp_path else 10.0)
    monkeypatch.setattr(room, "_docker_root", lambda: tmp_path / "root")
    monkeypatch.setattr(room, "_move_docker", moved.append)
    assert room.main(["--app", str(tmp_path), "--environment", "serve"]) == 0 and moved == [tmp_path / "docker"]
    assert room.main(["--app", str(tmp_path), "--environment", "nope"]) == 2


def test_the_deploy_job_makes_room_before_it_deploys() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy-environment.yml").read_text())
    runs = [s.get("run", "") for s in workflow["jobs"]["deploy"]["steps"]]
    room = runs.index('make docker-room ENV="$ENVIRONMENT"')
    assert room < runs.index('make deploy ENV="$ENVIRONMENT"')
