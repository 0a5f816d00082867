"""What a new user trips on first: plan's warnings, table and per-GPU throughput, init's
capacity types, guard's baseline and Node.js, and the cfn-lint the gate runs. The wheel itself,
every offline verb from it and the library app are tests/app/test_wheel.py's."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import yaml

from fminfra.cli.main import main
from fminfra.config import load_config, parse_config
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION
from fminfra.core.resources import bundled_node
from fminfra.ops import guard
from fminfra.ops.gate import CFN_LINT_MISSING
from fminfra.ops.plan import plan_warnings, render_plan
from tests.conftest import ROOT

CAPACITY_EC2 = ROOT / "tests" / "configs" / "capacity-ec2.yaml"

# --- plan -----------------------------------------------------------------------------------------


def test_plan_prints_each_warning_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """stdout is the plan; every warning once, on stderr (as `validate` prints them)."""
    assert main(["plan", str(CAPACITY_EC2)]) == 0
    out = capsys.readouterr()
    warnings = plan_warnings(load_config(CAPACITY_EC2))
    assert len(warnings) >= 5
    assert "WARN" not in out.out
    assert out.err.splitlines() == warnings


def test_plan_lists_the_slurm_controller_and_login_groups() -> None:
    lines = render_plan(load_config(ROOT / "config" / "dev.yaml")).splitlines()
    rows = [line.split() for line in lines]
    assert ["controller", "slurm", "controller", "ml.m5.12xlarge", "1", "0", "-", "-", "on-demand", "-"] in rows
    assert ["login", "slurm", "login", "ml.m5.4xlarge", "1", "0", "-", "-", "on-demand", "-"] in rows
    # no login nodes, no login row
    assert not [
        r
        for r in (line.split() for line in render_plan(load_config(ROOT / "tests/configs/hp-slurm-inference.yaml")).splitlines())
        if r[:1] == ["login"]
    ]


def test_plan_throughput_per_gpu_counts_the_gpus_that_mount_the_file_system() -> None:
    """Inference node groups do not mount FSx: hp-slurm-inference's 32 training GPUs share it, not all 51."""
    data = yaml.safe_load((ROOT / "tests/configs/hp-slurm-inference.yaml").read_text())
    data["storage"] = yaml.safe_load((ROOT / "config/dev.yaml").read_text())["storage"]
    cfg = parse_config(data, "f.yaml")
    text = render_plan(cfg)
    assert "total GPUs (training groups and inference at max size): 51" in text
    assert cfg.storage is not None and cfg.storage.lustre is not None
    per_gpu = cfg.storage.lustre.throughput_gb_per_s / 32
    assert f"{per_gpu:.3f} GB/s per training GPU (32 GPUs)" in text


# --- init -----------------------------------------------------------------------------------------

BASE = ["init", "--name", "blocks", "--account", "123456789012", "--region", "us-west-2", "--orchestrator", "ec2"]


def test_init_writes_a_capacity_block_config_that_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "blocks.yaml"
    args = ["--capacity-type", "capacity-block", "--reservation-id", "cr-0123456789abcdef0"]
    window = ["--starts-at", "2027-01-10T11:30:00Z", "--ends-at", "2027-01-17T11:30:00Z"]
    assert main([*BASE, *args, *window, "--output", str(out)]) == 0
    cap = load_config(out).compute.instance_groups[0].capacity
    assert (cap.type, cap.reservation_ids) == ("capacity-block", ["cr-0123456789abcdef0"])
    assert cap.starts_at is not None and cap.starts_at.isoformat() == "2027-01-10T11:30:00+00:00"
    assert main(["validate", str(out)]) == 0


def test_init_writes_an_existing_reservation_config_that_validates(tmp_path: Path) -> None:
    out = tmp_path / "reserved.yaml"
    ids = ["--reservation-id", "cr-0123456789abcdef0", "--reservation-id", "cr-0123456789abcdef1"]
    assert main([*BASE, "--capacity-type", "reservation", *ids, "--output", str(out)]) == 0
    cap = load_config(out).compute.instance_groups[0].capacity
    assert (cap.type, cap.reservation_ids) == ("reservation", ["cr-0123456789abcdef0", "cr-0123456789abcdef1"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capacity-type", "reservation"], "--capacity-type reservation needs --reservation-id"),
        (["--region", "mars-1"], "--region: unknown region 'mars-1'; known: " + ", ".join(AZ_ID_PREFIX_BY_REGION)),
        (["--capacity-type", "capacity-block"], "--capacity-type capacity-block needs --reservation-id"),
        (
            ["--reservation-id", "cr-0123456789abcdef0"],
            "--reservation-id: only with --capacity-type reservation or capacity-block, got on-demand",
        ),
        (
            ["--capacity-type", "reservation", "--reservation-id", "cr-0123456789abcdef0", "--starts-at", "2027-01-10T11:30:00Z"],
            "--starts-at: only with --capacity-type capacity-block, got reservation",
        ),
    ],
)
def test_init_capacity_flags_that_do_not_fit_are_one_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.yaml"
    assert main([*BASE, *args, "--output", str(out)]) == 2
    assert capsys.readouterr().err == f"init: {message} (nothing written)\n"
    assert not out.exists()


def test_init_a_capacity_block_on_hyperpod_is_the_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.yaml"
    args = ["init", "--name", "x", "--account", "123456789012", "--region", "us-west-2", "--orchestrator", "slurm"]
    assert main([*args, "--capacity-type", "capacity-block", "--reservation-id", "cr-0123456789abcdef0", "--output", str(out)]) == 2
    assert "capacity-block is not available to HyperPod groups (orchestrator slurm)" in capsys.readouterr().err
    assert not out.exists()


# --- guard and gate -------------------------------------------------------------------------------


def test_guard_with_an_empty_baseline_folder_stops_before_synthesizing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_synth(config_path: Path) -> None:
        raise AssertionError("synthesized although the baseline folder is empty")

    monkeypatch.setattr(guard, "synthesize", no_synth)
    empty = tmp_path / "baseline"
    empty.mkdir()
    assert main(["guard", "dev", "--baseline", str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"{empty}: (folder): no *.template.json files (an empty baseline); create it with `python -m fminfra guard CONFIG --update-baseline`\n"
    )


def test_the_cli_runs_jsii_on_the_bundled_node_unless_jsii_node_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    node = bundled_node()
    assert node is not None and node.is_file() and os.access(node, os.X_OK)
    monkeypatch.delenv("JSII_NODE", raising=False)
    assert main(["schema"]) == 0
    assert os.environ["JSII_NODE"] == str(node)
    monkeypatch.setenv("JSII_NODE", "/opt/node/bin/node")  # the user's own choice wins
    assert main(["schema"]) == 0
    assert os.environ["JSII_NODE"] == "/opt/node/bin/node"


def test_without_cfn_lint_gate_and_guard_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cfnlint" else real(name, *a))
    templates = tmp_path / "t"
    templates.mkdir()
    (templates / "S.template.json").write_text('{"Resources": {}}')
    assert main(["guard", "--templates", str(templates), "--baseline", str(templates)]) == 2
    assert capsys.readouterr().err == f"guard: {CFN_LINT_MISSING}\n"
    from fminfra.ops.common import UsageError
    from fminfra.ops.gate import cfn_lint

    with pytest.raises(UsageError, match=r"^gate: cfn-lint is not installed beside this Python: pip install 'cfn-lint>=1.58.0,<2'"):
        cfn_lint([templates / "S.template.json"])
