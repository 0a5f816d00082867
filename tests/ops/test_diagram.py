"""`fminfra diagram`: the Mermaid output parses with mermaid's own parser (run in Node with jsdom),
the SVG renders (cairosvg), and every GPU group, the file system and each workspace appear; a
1,000-node environment draws with as many boxes as a 2-node one."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fminfra.config import load_config, parse_config
from fminfra.core.assembly import read_assembly
from fminfra.ops.diagram import build, mermaid, png, svg
from tests.conftest import ROOT, SHIPPED_CONFIGS, Synth

PARSER = ROOT / "tests" / "ops" / "mermaid_parse.mjs"
NODE = shutil.which("node", path=str(ROOT / ".venv" / "bin")) or "node"
CONFIGS = [*SHIPPED_CONFIGS, ROOT / "examples" / "ec2-capacity-block.yaml", ROOT / "tests" / "configs" / "cost-ec2.yaml"]


def _parse(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "diagram.mmd"
    source.write_text(text)
    env = {**os.environ, "NODE_PATH": str(ROOT / "node_modules")}
    return subprocess.run([NODE, str(PARSER), str(source)], capture_output=True, text=True, check=False, cwd=ROOT, env=env, timeout=120)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_mermaid_parses_and_shows_every_group_file_system_and_workspace(synth: Synth, tmp_path: Path, config: Path) -> None:
    cfg = load_config(config)
    pic = build(cfg, synth.stacks[cfg.name])
    text = mermaid(pic)
    result = _parse(text, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    labels = " ".join(b.label for b in pic.boxes)
    for group in cfg.compute.instance_groups:
        assert f"{group.name}: {group.count} x" in labels
    if cfg.storage and cfg.storage.lustre:
        assert "FSx for Lustre" in labels
    if cfg.observability.prometheus:
        assert "Amazon Managed Prometheus" in labels
    if cfg.observability.grafana.enabled:
        assert "Amazon Managed Grafana" in labels


def test_the_parser_rejects_a_broken_diagram(tmp_path: Path) -> None:
    """A test of the test: mermaid's parser is really asked."""
    assert _parse("flowchart LR\n  a[[broken -->\n", tmp_path).returncode != 0


def test_svg_renders_to_png(synth: Synth) -> None:
    cfg = load_config(ROOT / "config" / "staging.yaml")
    data = png(svg(build(cfg, synth.stacks[cfg.name])))
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_thousand_nodes_draw_like_two(synth: Synth) -> None:
    cfg = load_config(ROOT / "config" / "dev.yaml")
    stacks = synth.stacks[cfg.name]
    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    big = copy.deepcopy(data)
    big["compute"]["instance_groups"][0]["count"] = 1000
    small_pic, big_pic = build(cfg, stacks), build(parse_config(big), stacks)
    assert len(small_pic.boxes) == len(big_pic.boxes)
    assert len(svg(big_pic)) < 2 * len(svg(small_pic))


def test_diagram_command_writes_each_format(synth: Synth, tmp_path: Path) -> None:
    from fminfra.cli.main import main

    for fmt in ("mermaid", "svg", "png"):
        out = tmp_path / f"dev.{fmt}"
        assert main(["diagram", "dev", "--outdir", str(synth.outdir), "--format", fmt, "--output", str(out)]) == 0
        assert out.stat().st_size > 500
    assert read_assembly(synth.outdir)["dev"]


def test_diagram_output_to_a_folder_or_a_missing_folder_is_one_line(
    synth: Synth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: IsADirectoryError and FileNotFoundError tracebacks.
    from fminfra.cli.main import main

    missing = tmp_path / "nowhere" / "dev.svg"
    for output, line in [
        (tmp_path, f"--output {tmp_path}: is a folder; give a file name in it"),
        (missing, f"--output {missing}: no such folder {missing.parent}; create it first or give another path"),
    ]:
        assert main(["diagram", "dev", "--outdir", str(synth.outdir), "--format", "svg", "--output", str(output)]) == 2
        assert capsys.readouterr().err.splitlines() == [line]
