"""The CLI: exit codes, one-line messages, and `cdk synth -c config=...` on a new environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fminfra.cli.main import main
from tests.conftest import ELSEWHERE_COMPUTE_AZ_ID, ELSEWHERE_NAME, ROOT, SHIPPED_CONFIGS, CliSynth, cdk_synth

ALL_TRAINING_TYPES_INTERFACES = {"p5.48xlarge": "32/32", "p5en.48xlarge": "16/16", "p6-b200.48xlarge": "8/8"}


def test_validate_prints_ok_for_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, SHIPPED_CONFIGS)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{p}: ok" for p in SHIPPED_CONFIGS]


def test_validate_accepts_environment_names(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["validate", "dev"]) == 0
    assert capsys.readouterr().out == "config/dev.yaml: ok\n"


def _write(tmp_path: Path, file_name: str, **changes: object) -> Path:
    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    path = tmp_path / file_name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"network__compute_az_idd": "usw2-az4"}, "network.compute_az_idd"),
        ({"network__compute_az_id": "usw2-az3"}, "network.compute_az_id"),
        ({"network__az_ids": ["usw2-az1", "use1-az1", "usw2-az4"]}, "network.az_ids[1]"),
        ({"compute__instance_groups__0__instance_type": "p7.48xlarge"}, "compute.instance_groups[0].instance_type"),
        ({"compute__instance_groups__0__count": -1}, "compute.instance_groups[0].count"),
    ],
)
def test_bad_config_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, field: str) -> None:
    path = _write(tmp_path, "bad.yaml", **changes)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{path}: {field}: ")


def test_validate_missing_file_and_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "no/such.yaml"]) == 2
    assert capsys.readouterr().err == "no/such.yaml: (file): no such file\n"
    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    assert {"name", "account", "region", "network", "compute"} <= set(schema["required"])


def test_plan_reports_every_efa_interface(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [*SHIPPED_CONFIGS, *sorted((ROOT / "examples").glob("*.yaml"))]
    assert main(["plan", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "ml.p5.48xlarge  2      16    32/32" in out
    # the group table's rows (the pod-IP table of Karpenter pools has no EFA column)
    for line in (line for line in out.splitlines() if "karpenter pool" not in line):
        for type_name, efa in ALL_TRAINING_TYPES_INTERFACES.items():
            if f" {type_name} " in line or f" ml.{type_name} " in line:
                assert f" {efa} " in line


def test_python_m_entry_point_has_no_traceback(tmp_path: Path) -> None:
    bad = _write(tmp_path, "typo.yaml", compute__orchestratr="slurm")
    result = subprocess.run([sys.executable, "-m", "fminfra", "validate", str(bad)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.slow
def test_cdk_cli_synthesizes_a_new_environment_from_any_config(cli_synth_elsewhere: CliSynth) -> None:
    """A copy of dev with another name, region and AZ IDs: its physical names differ from dev's."""
    result = cli_synth_elsewhere.result
    assert result.returncode == 0, result.stderr[-3000:]
    from fminfra.core.assembly import read_assembly

    stacks = read_assembly(cli_synth_elsewhere.outdir)
    assert list(stacks) == [ELSEWHERE_NAME]
    text = "".join(json.dumps(s.template) for s in stacks[ELSEWHERE_NAME])
    assert f"fminfra-{ELSEWHERE_NAME}-" in text and "fminfra-dev-" not in text
    assert ELSEWHERE_COMPUTE_AZ_ID in text and "usw2" not in text


@pytest.mark.slow
def test_cdk_cli_bad_config_fails_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.yaml", network__compute_az_id="usw2-az9")
    result = cdk_synth(path, tmp_path / "o")
    assert result.returncode != 0
    assert f"{path}: network.compute_az_id: 'usw2-az9' is not one of az_ids" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    """`python -m fminfra accept staging --dry-run | head -1`: the pipe closes early; no BrokenPipeError traceback."""
    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m fminfra accept staging --dry-run | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr[-2000:]
    assert result.stdout.strip() in ("0", "141")  # 0 when the whole output fit in the pipe's buffer
