"""Config forms and CLI behaviour a new user meets, each through the real entry point
(`fminfra.cli.main.main` or `python -m fminfra`): the exit code and the one line."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.cli.main import main
from fminfra.config import load_config, parse_config
from fminfra.ops.show import render
from tests.conftest import ROOT, SHIPPED_CONFIGS, Synth

DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
PROD = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
INFERENCE_ONLY = ROOT / "tests" / "configs" / "eks-inference-only.yaml"


def _write(tmp_path: Path, data: Any, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- inference-only EKS


def test_inference_only_environment_is_written_the_obvious_way(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["plan", str(INFERENCE_ONLY)], capsys)
    assert code == 0
    assert out.splitlines()[0].endswith("inference only: an EKS cluster with GPU node groups, no training cluster")


def test_inference_only_synthesizes_an_eks_cluster_and_no_training_cluster(synth: Synth) -> None:
    assert synth.resources("eks-inf", "Compute", "AWS::EKS::Nodegroup")
    assert synth.resources("eks-inf", "Compute", "AWS::EKS::Cluster") or any(
        "Eks" in lid for lid in synth.template("eks-inf", "Compute")["Resources"]
    )
    assert not synth.resources("eks-inf", "Compute", "AWS::SageMaker::Cluster")
    assert not synth.resources("eks-inf", "Compute", "AWS::AutoScaling::AutoScalingGroup")


@pytest.mark.parametrize(
    ("compute", "line"),
    [
        (
            {},
            "compute: give instance_groups with an orchestrator (slurm, eks, ec2), or inference_node_groups for an inference-only EKS cluster",
        ),
        (
            {"instance_groups": [{"name": "w", "instance_type": "p5.48xlarge", "count": 1}]},
            "compute.orchestrator: instance_groups need an orchestrator: slurm or eks (HyperPod) or ec2 (Auto Scaling groups)",
        ),
    ],
)
def test_compute_without_orchestrator(tmp_path: Path, capsys: pytest.CaptureFixture[str], compute: dict[str, Any], line: str) -> None:
    data = copy.deepcopy(DEV)
    data["compute"] = compute
    path = _write(tmp_path, data)
    assert _run(["validate", str(path)], capsys) == (2, "", f"{path}: {line}\n")


# ---------------------------------------------------------------- offline cross-checks


def test_training_plan_in_another_region_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = copy.deepcopy(PROD)
    data["compute"]["instance_groups"][0]["capacity"]["training_plan_arn"] = "arn:aws:sagemaker:us-west-2:333333333333:training-plan/p"
    path = _write(tmp_path, data)
    code, _, err = _run(["validate", str(path)], capsys)
    assert code == 2
    assert err == (
        f"{path}: compute.instance_groups[0].capacity.training_plan_arn: the training plan is in 333333333333, us-west-2; "
        "HyperPod uses plans of its own account and region (333333333333, us-east-1)\n"
    )


def test_pipeline_connection_in_another_account_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    arn = pipeline["source"]["connection_arn"]
    parts = arn.split(":")
    parts[4] = "999999999999"
    pipeline["source"]["connection_arn"] = ":".join(parts)
    for env in pipeline["environments"]:
        env["config"] = str(ROOT / env["config"])
    path = _write(tmp_path, pipeline, "pipeline.yaml")
    code, _, err = _run(["validate", str(path)], capsys)
    assert code == 2
    assert err.startswith(f"{path}: (top level): source.connection_arn is in 999999999999, {parts[3]}; the pipeline runs in ")
    assert len(err.splitlines()) == 1


def test_an_az_name_gets_the_id_form_of_its_region_and_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = copy.deepcopy(DEV)
    data["network"]["az_ids"][0] = "us-west-2a"
    path = _write(tmp_path, data)
    code, _, err = _run(["validate", str(path)], capsys)
    assert code == 2
    assert err.startswith(f"{path}: network.az_ids[0]: 'us-west-2a' is an AZ name, which maps to a different zone in every account;")
    assert "e.g. usw2-az1" in err and "aws ec2 describe-availability-zones --region us-west-2" in err


# ---------------------------------------------------------------- validate: folders and pipeline files


def test_validate_takes_a_folder_and_recognises_the_pipeline_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["validate", str(ROOT / "config"), str(ROOT / "pipeline.yaml")], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[: len(SHIPPED_CONFIGS)] == [f"{p}: ok" for p in SHIPPED_CONFIGS]
    assert lines[-1].startswith(f"{ROOT / 'pipeline.yaml'}: ok (pipeline ")


def test_validate_names_both_files_of_a_repeated_environment_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each file is valid alone; synth of the folder would fail on the name, so validate of the folder does.
    first, second = _write(tmp_path, DEV, "a.yaml"), _write(tmp_path, DEV, "b.yaml")
    code, out, err = _run(["validate", str(tmp_path)], capsys)
    assert (code, out) == (2, f"{first}: ok\n")  # the second is refused, not "ok" then refused (newcomer read, C)
    assert err == (
        f"{second}: name: 'dev' is already the name of {first}; environment names must be unique across the files "
        "synthesized together (one Stage each); rename one\n"
    )
    # The same file named twice is one file.
    assert _run(["validate", str(first), str(first)], capsys)[:2] == (0, f"{first}: ok\n")


def test_validate_of_an_empty_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["validate", str(tmp_path)], capsys) == (2, "", f"{tmp_path}: (folder): no config files (*.yaml, *.yml) in it\n")


# ---------------------------------------------------------------- show and init


@pytest.mark.parametrize("path", [*SHIPPED_CONFIGS, INFERENCE_ONLY], ids=lambda p: p.stem)
def test_show_prints_every_default_and_reads_back_as_the_same_config(path: Path) -> None:
    cfg = load_config(path)
    text = render(cfg)
    assert parse_config(yaml.safe_load(text)) == cfg
    assert "flow_log_retention_days:" in text  # a default the file does not set
    assert "# derived:" in text


@pytest.mark.parametrize("orchestrator", ["slurm", "eks", "ec2", "none"])
def test_init_writes_a_config_that_validates_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], orchestrator: str) -> None:
    out = tmp_path / "new.yaml"
    # us-west-2: EC2 offers the default p5.48xlarge there on demand (not in eu-west-1: fminfra/core/ec2_regional.json)
    args = ["init", "--name", "new", "--account", "123456789012", "--region", "us-west-2", "--orchestrator", orchestrator]
    code, _, err = _run([*args, "--output", str(out)], capsys)
    assert code == 0, err
    assert _run(["validate", str(out)], capsys)[:2] == (0, f"{out}: ok\n")
    # Never overwritten.
    assert _run([*args, "--output", str(out)], capsys) == (
        2,
        "",
        f"{out}: already exists; fminfra init never overwrites a file (give --output)\n",
    )


def test_init_refuses_flags_that_make_an_invalid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bad.yaml"
    args = ["init", "--name", "bad", "--account", "123456789012", "--region", "us-west-2", "--instance-type", "g6.xlarge"]
    code, _, err = _run([*args, "--output", str(out)], capsys)
    # The flag, not the config field, and not the file it never wrote.
    assert code == 2 and err.startswith("init: --instance-type: 'g6.xlarge' is not an EFA training type")
    assert err.endswith(" (nothing written)\n") and str(out) not in err
    assert not out.exists()
    plan = "arn:aws:sagemaker:eu-west-1:123456789012:training-plan/p"
    args = ["init", "--name", "bad", "--account", "123456789012", "--region", "us-west-2", "--capacity-type", "training-plan"]
    code, _, err = _run([*args, "--training-plan-arn", plan, "--output", str(out)], capsys)
    assert code == 2 and err.startswith("init: --training-plan-arn: ") and not out.exists()


# ---------------------------------------------------------------- gate, guard, credentials


def test_gate_without_a_cloud_assembly_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "cdk.out"
    code, _, err = _run(["gate", "--outdir", str(missing), str(ROOT / "config" / "dev.yaml")], capsys)
    assert (code, err) == (2, f"{missing}: (assembly): no cloud assembly here (no manifest.json); run `make synth` first\n")


def dev_only_assembly(synth: Synth, dest: Path) -> Path:
    """The session's cloud assembly cut to dev, as a synth of config/dev.yaml alone leaves it: the
    manifest with dev's nested assembly only (linked, not copied) and the validation report cdk-nag
    wrote; no policy-pack record, as the session's app writes none."""
    dest.mkdir()
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    manifest["artifacts"] = {
        k: a for k, a in manifest["artifacts"].items() if a.get("type") == "cdk:cloud-assembly" and a["properties"]["displayName"] == "dev"
    }
    (dest / "manifest.json").write_text(json.dumps(manifest))
    (dest / "assembly-dev").symlink_to(synth.outdir / "assembly-dev")
    (dest / "validation-report.json").write_text((synth.outdir / "validation-report.json").read_text())
    return dest


def test_gate_says_cdk_nag_did_not_run_when_it_did_not(synth: Synth, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The test session's app attaches cdk-nag but writes no policy-pack record: the gate must not say ok.
    On dev's part of the assembly: the gate lints every environment it finds, and what this test
    asserts is the cdk-nag line and dev's table (every template's lint: tests/policy/rules/test_checks.py)."""
    assert not (synth.outdir / "fminfra-policy-packs.json").exists()
    code, out, _ = _run(
        ["gate", "--outdir", str(dev_only_assembly(synth, tmp_path / "cdk.out")), str(ROOT / "config" / "dev.yaml")], capsys
    )
    assert code == 1
    assert "cfn-lint ok (5 templates), own rules ok" in out, out
    assert (
        "policy gates: cdk-nag not run (no fminfra-policy-packs.json: synthesize with `make synth`; in an app of your own, "
        "build it with fminfra.build_app and call fminfra.app.synth.record_policy_packs(app) after app.synth())"
    ) in out
    assert "count: instances; for inference node groups min-desired-max" in out
    assert "controller  slurm controller" in out


def test_gate_is_in_help() -> None:
    result = subprocess.run([sys.executable, "-m", "fminfra", "--help"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert result.returncode == 0 and "gate" in result.stdout and "(and later" not in result.stdout


def test_guard_says_there_is_no_baseline_before_synthesizing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none"
    code, _, err = _run(["guard", str(ROOT / "config" / "dev.yaml"), "--baseline", str(missing)], capsys)
    assert (code, err) == (2, f"{missing}: (folder): no baseline; create it with `python -m fminfra guard CONFIG --update-baseline`\n")


NO_CREDENTIALS = "no AWS credentials found (environment variables, --profile, SSO or an instance role); this command needs read access to the account in the config\n"


@pytest.mark.parametrize(
    "args",
    [
        ["preflight", "config/dev.yaml"],
        ["capacity-blocks", "find", "--instance-type", "p5.48xlarge", "--count", "1", "--duration-days", "1", "--region", "us-east-1"],
        ["grafana", "sync", "tests/configs/obs-grafana.yaml"],
    ],
    ids=["preflight", "capacity-blocks", "grafana"],
)
def test_every_command_without_credentials_says_the_same_one_line(tmp_path: Path, args: list[str]) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = subprocess.run(
        [sys.executable, "-m", "fminfra", *args], capture_output=True, text=True, check=False, cwd=ROOT, env=env, timeout=120
    )
    assert (result.returncode, result.stderr) == (2, NO_CREDENTIALS)


# ---------------------------------------------------------------- the JSON schema editors use


def _schema_check(schema: Path, config: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("check-jsonschema")
    return subprocess.run([str(exe), "--schemafile", str(schema), str(config)], capture_output=True, text=True, check=False, timeout=120)


def test_the_schema_accepts_every_shipped_config_and_catches_what_users_get_wrong(tmp_path: Path) -> None:
    schema = tmp_path / "fminfra.schema.json"
    schema.write_text(
        subprocess.run([sys.executable, "-m", "fminfra", "schema"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    )
    for config in [*SHIPPED_CONFIGS, INFERENCE_ONLY]:
        assert _schema_check(schema, config).returncode == 0, config
    for path, value in (("az_ids", ["us-west-2a"]), ("instance_type", "p5.48xlarg")):
        data = copy.deepcopy(DEV)
        if path == "az_ids":
            data["network"]["az_ids"] = value
        else:
            data["compute"]["instance_groups"][0]["instance_type"] = value
        broken = _write(tmp_path, data, f"{path}.yaml")
        assert _schema_check(schema, broken).returncode == 1, path


def test_the_gate_reads_stacks_outside_a_stage(tmp_path: Path) -> None:
    """The pipeline and GitHub OIDC stacks live at the app's top level; the gate reads them too."""
    from fminfra.core.assembly import APP_STACKS, read_assembly

    (tmp_path / "Top.template.json").write_text('{"Resources": {"R": {"Type": "AWS::SNS::Topic"}}}')
    manifest = {"artifacts": {"Top": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "Top.template.json"}}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert read_assembly(tmp_path) == {}
    (stack,) = read_assembly(tmp_path, include_app_stacks=True)[APP_STACKS]
    assert stack.stack_name == "Top" and stack.resource_count == 1


def test_a_dead_container_credentials_endpoint_is_one_line(tmp_path: Path) -> None:
    """CodeBuild's container credentials pointing at an endpoint that does not answer: one line, exit 2."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1:9/credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = subprocess.run(
        [sys.executable, "-m", "fminfra", "preflight", "config/dev.yaml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("AWS credentials could not be retrieved: ") and len(result.stderr.splitlines()) == 1


def test_gate_names_a_config_missing_from_the_assembly(synth: Synth, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "other.yaml"
    data = copy.deepcopy(DEV)
    data["name"] = "other"
    config.write_text(yaml.safe_dump(data))
    code, _, err = _run(["gate", "--outdir", str(synth.outdir), str(config)], capsys)
    assert (code, err) == (2, f"{synth.outdir}: (assembly): no stacks of environment other; synthesize it first\n")


def test_gate_lints_each_environment_against_its_own_region(synth: Synth) -> None:
    """dev's HyperPod workers are ml.p5.48xlarge; in a region whose HyperPod list lacks that type,
    cfn-lint with that region fails the template, and with dev's own region passes it."""
    from fminfra.core.regional import _data
    from fminfra.ops.gate import cfn_lint

    lists = _data()["hyperpod_instance_types"]
    elsewhere = next(r for r, types in sorted(lists.items()) if "ml.p5.48xlarge" not in types)
    (compute,) = [s.path for s in synth.stacks["dev"] if s.stack_name == "dev-Compute"]
    assert cfn_lint([compute], ROOT / ".cfnlintrc.yaml", "us-west-2")[0] == 0
    code, output = cfn_lint([compute], ROOT / ".cfnlintrc.yaml", elsewhere)
    assert code != 0 and "E3644" in output and elsewhere in output


@pytest.mark.parametrize("content", ['{"Resources": [', "[]"], ids=["truncated", "a list"])
def test_a_broken_template_in_the_assembly_is_one_line(
    synth: Synth, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    import shutil

    broken = tmp_path / "cdk.out"
    shutil.copytree(synth.outdir, broken)
    (compute,) = [s.path for s in synth.stacks["dev"] if s.stack_name == "dev-Compute"]
    target = broken / compute.relative_to(synth.outdir)
    target.write_text(content)
    for args in (["cost", "dev"], ["diagram", "dev"], ["gate", str(ROOT / "config" / "dev.yaml")]):
        code, _, err = _run([*args, "--outdir", str(broken)], capsys)
        assert code == 2 and err.startswith(f"{target}: (file): ") and len(err.splitlines()) == 1, (args, err)
