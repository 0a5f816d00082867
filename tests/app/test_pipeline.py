"""The promotion pipeline: pipeline.yaml, waves in order, checks before each deploy, approval before prod."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from fminfra.app.pipeline import PipelineStack, load_pipeline
from fminfra.core.errors import ConfigError
from fminfra.ops import guard
from fminfra.ops.gate import cfn_lint
from tests.conftest import ROOT, Synth

# cfn-lint findings on what CDK Pipelines itself generates (not on fminfra's stacks), ignored for
# the pipeline template only: E3703 "prefer Fn::Sub over Fn::Join" on the CloudFormation deploy
# actions' role ARNs (the CDK synthesizer writes them as Fn::Join), W3005 a redundant DependsOn
# the CodePipeline L2 adds. Neither changes what deploys.
PIPELINE_CFN_LINT_IGNORED = ("E3703", "W3005")


@pytest.fixture(scope="module")
def pipeline(pipeline_synth: tuple[PipelineStack, Path, dict[str, Any]]) -> tuple[PipelineStack, Path, dict[str, Any]]:
    return pipeline_synth  # synthesized once per session in tests/conftest.py


def _stages(template: dict[str, Any]) -> list[dict[str, Any]]:
    pipelines = [r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"]
    assert len(pipelines) == 1
    return pipelines[0]["Properties"]["Stages"]


def _buildspec(template: dict[str, Any], action: dict[str, Any]) -> str:
    project = action["Configuration"]["ProjectName"]["Ref"]
    return template["Resources"][project]["Properties"]["Source"]["BuildSpec"]


def test_waves_deploy_the_environments_in_order(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    names = [s["Name"] for s in _stages(template)]
    assert names[:2] == ["Source", "Build"]
    assert [n for n in names if n in ("dev", "staging", "prod")] == ["dev", "staging", "prod"]
    assert names.index("dev") < names.index("staging") < names.index("prod")


def test_prod_approval_comes_after_its_checks_and_before_its_deploy(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    """Reviewers see preflight's and the guard's result (the Check step) before they approve."""
    _, _, template = pipeline
    for stage in _stages(template):
        # (staging's Accept-staging, after its deploy, is the private-endpoint gate: tested below)
        approvals = [a for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Approval" and not a["Name"].startswith("Accept-")]
        if stage["Name"] == "prod":
            assert [a["Name"] for a in approvals] == ["Approve-prod"]
            first_deploy = min(a["RunOrder"] for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Deploy")
            check = next(a for a in stage["Actions"] if a["Name"] == "Check-prod")
            assert check["RunOrder"] < approvals[0]["RunOrder"] < first_deploy
            assert "Read the Check-prod log" in approvals[0]["Configuration"]["CustomData"]
        else:
            assert approvals == [], stage["Name"]


@pytest.mark.parametrize(("env", "config"), [("dev", "config/dev.yaml"), ("staging", "config/staging.yaml"), ("prod", "config/prod.yaml")])
def test_preflight_and_guard_run_before_each_deploy(pipeline: tuple[PipelineStack, Path, dict[str, Any]], env: str, config: str) -> None:
    _, _, template = pipeline
    stage = next(s for s in _stages(template) if s["Name"] == env)
    check = next(a for a in stage["Actions"] if a["Name"] == f"Check-{env}")
    deploys = [a for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Deploy"]
    assert {a["Configuration"]["StackName"] for a in deploys} >= {f"{env}-Network", f"{env}-Compute"}
    assert check["RunOrder"] < min(a["RunOrder"] for a in deploys)
    commands = json.loads(_buildspec(template, check))["phases"]["build"]["commands"]
    # each command runs in one shell with errexit: a failing preflight or guard fails the step
    preflight = f"make preflight ENV={env} CONFIG_DIR={Path(config).parent}"
    guard_cmd = f"make guard-deployed ENV={env} CONFIG_DIR={Path(config).parent}"
    assert commands[0] == "make deps"
    assert commands.index(preflight) < commands.index(guard_cmd)


def test_checks_assume_only_the_target_accounts_lookup_role(pipeline: tuple[PipelineStack, Path, dict[str, Any]], synth: Synth) -> None:
    _, _, template = pipeline
    for env in ("dev", "staging", "prod"):
        cfg = synth.configs[env]
        lookup = f"arn:aws:iam::{cfg.account}:role/cdk-hnb659fds-lookup-role-{cfg.account}-{cfg.region}"
        project = next(
            r
            for r in template["Resources"].values()
            if r["Type"] == "AWS::CodeBuild::Project" and f"make preflight ENV={env} CONFIG_DIR=config" in json.dumps(r)
        )
        variables = {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}
        assert variables["TARGET_ROLE_ARN"] == lookup
        assume = [
            s
            for r in template["Resources"].values()
            if r["Type"] == "AWS::IAM::Policy"
            for s in r["Properties"]["PolicyDocument"]["Statement"]
            if s["Action"] == "sts:AssumeRole" and s["Resource"] == lookup
        ]
        assert len(assume) == 1


def acceptance_step_problems(template: dict[str, Any], env: str, cfg: Any) -> list[str]:
    """Where the gate must be: an Accept-ENV action after every deploy of the wave, running
    `make accept-gate`, whose role may assume the target's acceptance role and nothing else of the kind."""
    stage = next(s for s in _stages(template) if s["Name"] == env)
    action = next((a for a in stage["Actions"] if a["Name"] == f"Accept-{env}"), None)
    if action is None:
        return [f"{env}: no Accept-{env} action"]
    problems = []
    deploys = [a["RunOrder"] for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Deploy"]
    if action["RunOrder"] <= max(deploys):
        problems.append(f"{env}: Accept-{env} runs before the deploy ends")
    project = _projects(template)[action["Configuration"]["ProjectName"]["Ref"]]
    phases = json.loads(project["Properties"]["Source"]["BuildSpec"])["phases"]
    commands = phases["build"]["commands"]
    if f"make accept-gate ENV={env} CONFIG_DIR=config" not in commands:
        problems.append(f"{env}: commands {commands}")
    # CodeBuild's standard image has no Session Manager plugin
    # (docs/facts/pipeline.md#codebuild-standard-8-no-session-manager-plugin): the install phase,
    # which runs before the build commands, installs AWS's pinned .deb after checking its SHA-256
    install = phases.get("install", {}).get("commands", [])
    deb = "/tmp/session-manager-plugin.deb"
    expected = [
        rf"curl --fail .*--output {deb} https://s3\.amazonaws\.com/session-manager-downloads/plugin/1\.2\.\d+\.0/ubuntu_64bit/session-manager-plugin\.deb$",
        rf'echo "[0-9a-f]{{64}}  {deb}" \| sha256sum --check --strict$',
        rf"dpkg -i {deb}$",
    ]
    if [bool(re.match(e, c)) for e, c in zip(expected, install, strict=False)] != [True] * len(expected):
        problems.append(f"{env}: no pinned, checked session-manager-plugin install before the build: {install}")
    target = f"arn:aws:iam::{cfg.account}:role/fminfra-{env}-accept"
    role_id = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
    grants = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if "sts:AssumeRole" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]
    if [s["Resource"] for s in grants] != [target]:
        problems.append(f"{env}: assumes {[s['Resource'] for s in grants]}")
    if template["Resources"][role_id]["Properties"].get("RoleName") != f"fminfra-{env}-accept-step":
        problems.append(f"{env}: the step's role is not named as the acceptance role's trust expects")
    return problems


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_acceptance_gate_runs_after_each_deploy(pipeline: tuple[PipelineStack, Path, dict[str, Any]], synth: Synth, env: str) -> None:
    """Every shipped environment has training GPUs: the gate is on (pipeline.yaml accept.gate default).
    dev and prod are HyperPod Slurm (SSM from anywhere); staging's EKS endpoint is private (below)."""
    _, _, template = pipeline
    assert acceptance_step_problems(template, env, synth.configs[env]) == []


def private_gate_problems(template: dict[str, Any], env: str) -> list[str]:
    """Where the cluster's EKS endpoint is private, CodeBuild in the tooling account (no VPC) cannot
    reach it (docs/facts/eks.md#eks-private-endpoint-reach): the gate is a manual approval after the
    deploy that tells the operator to run `fminfra accept ENV` inside the VPC and approve only on exit 0;
    no CodeBuild step pretends to run it."""
    stage = next(s for s in _stages(template) if s["Name"] == env)
    action = next((a for a in stage["Actions"] if a["Name"] == f"Accept-{env}"), None)
    if action is None:
        return [f"{env}: no Accept-{env} action"]
    problems = []
    if action["ActionTypeId"]["Category"] != "Approval":
        problems.append(f"{env}: Accept-{env} is a {action['ActionTypeId']['Category']} action, not a manual approval")
    deploys = [a["RunOrder"] for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Deploy"]
    if action["RunOrder"] <= max(deploys):
        problems.append(f"{env}: Accept-{env} comes before the deploy ends")
    comment = (action.get("Configuration") or {}).get("CustomData", "")
    for words in (f"`fminfra accept {env}`", "VPC", "443", "Approve only if it exits 0"):
        if words not in comment:
            problems.append(f"{env}: the approval does not say {words!r}")
    return problems


def test_a_private_eks_endpoint_gate_is_a_manual_approval(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    assert private_gate_problems(template, "staging") == []


def test_private_gate_check_can_fail(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    """The check on the code as it was: staging had a CodeBuild Accept step that could never reach its cluster."""
    _, _, template = pipeline
    assert "dev: Accept-dev is a Build action, not a manual approval" in private_gate_problems(template, "dev")
    early = json.loads(json.dumps(template))
    stage = next(s for s in _stages(early) if s["Name"] == "staging")
    approval = next(a for a in stage["Actions"] if a["Name"] == "Accept-staging")
    approval["RunOrder"] = 1
    approval["Configuration"]["CustomData"] = "Approve?"
    problems = private_gate_problems(early, "staging")
    assert "staging: Accept-staging comes before the deploy ends" in problems
    assert "staging: the approval does not say 'Approve only if it exits 0'" in problems


def _load_problems(path: Path) -> list[str]:
    try:
        load_pipeline(path)
    except ConfigError as exc:
        return exc.problems
    return []


def test_a_private_eks_gate_needs_runner_labels(tmp_path: Path) -> None:
    """GitHub-hosted runners cannot reach a private endpoint: load_pipeline asks for a runner in the VPC."""
    envs = yaml.safe_load((ROOT / "pipeline.yaml").read_text())["environments"]
    staging = next(e for e in envs if e["config"] == "config/staging.yaml")
    assert staging["accept"]["runs_on"] == ["self-hosted", "fminfra-staging"]
    config = str(ROOT / "config" / "staging.yaml")
    path = _pipeline_file(tmp_path, environments=[{"config": config, "accept": {"nccl_fail_gbps": 250}}])
    assert _load_problems(path) == [
        f"{path}: environments[0].accept.runs_on: required: the gate is on and {config} has a private-only EKS endpoint"
        " (compute.eks.public_access_cidrs: []), which GitHub-hosted runners cannot reach; give the labels of a runner in its VPC,"
        " e.g. [self-hosted, fminfra-staging], or accept: {gate: false}"
    ]
    path = _pipeline_file(tmp_path, environments=[{"config": config, "accept": {"gate": False, "runs_on": ["self-hosted"]}}])
    assert _load_problems(path) == [
        f"{path}: environments[0].accept.runs_on: set, but the gate is off for {config}: remove it or turn the gate on"
    ]
    path = _pipeline_file(tmp_path, environments=[{"config": config, "accept": {"gate": False}}])
    assert _load_problems(path) == []  # no gate, no runner needed
    path = _pipeline_file(tmp_path, environments=[{"config": config, "accept": {"runs_on": ["self-hosted", " "]}}])
    assert _load_problems(path) == [f"{path}: environments[0].accept.runs_on: runner labels must be non-empty strings, got [' ']"]


def test_acceptance_step_check_can_fail(pipeline: tuple[PipelineStack, Path, dict[str, Any]], synth: Synth) -> None:
    _, _, template = pipeline
    broken = json.loads(json.dumps(template))
    stage = next(s for s in _stages(broken) if s["Name"] == "dev")
    stage["Actions"] = [a for a in stage["Actions"] if a["Name"] != "Accept-dev"]
    assert acceptance_step_problems(broken, "dev", synth.configs["dev"]) == ["dev: no Accept-dev action"]
    early = json.loads(json.dumps(template))
    stage = next(s for s in _stages(early) if s["Name"] == "prod")
    next(a for a in stage["Actions"] if a["Name"] == "Accept-prod")["RunOrder"] = 1
    assert "prod: Accept-prod runs before the deploy ends" in acceptance_step_problems(early, "prod", synth.configs["prod"])
    # the step as it was: no install phase commands (the plugin missing on CodeBuild's image); prod,
    # a Slurm environment (staging's private EKS endpoint makes its Accept a manual approval)
    bare = json.loads(json.dumps(template))
    stage = next(s for s in _stages(bare) if s["Name"] == "prod")
    project = _projects(bare)[next(a for a in stage["Actions"] if a["Name"] == "Accept-prod")["Configuration"]["ProjectName"]["Ref"]]
    spec = json.loads(project["Properties"]["Source"]["BuildSpec"])
    unchecked = json.loads(json.dumps(spec))
    spec["phases"]["install"].pop("commands")
    project["Properties"]["Source"]["BuildSpec"] = json.dumps(spec)
    assert acceptance_step_problems(bare, "prod", synth.configs["prod"]) == [
        "prod: no pinned, checked session-manager-plugin install before the build: []"
    ]
    unchecked["phases"]["install"]["commands"] = [c for c in unchecked["phases"]["install"]["commands"] if "sha256sum" not in c]
    project["Properties"]["Source"]["BuildSpec"] = json.dumps(unchecked)
    assert "no pinned, checked session-manager-plugin" in acceptance_step_problems(bare, "prod", synth.configs["prod"])[0]


def test_gate_defaults_to_training_gpus_and_refuses_a_gate_without_them(tmp_path: Path) -> None:
    from fminfra.config.pipeline import gate_enabled

    pipeline_config, configs = load_pipeline(ROOT / "pipeline.yaml")
    assert [gate_enabled(e, c) for e, c in zip(pipeline_config.environments, configs, strict=True)] == [True, True, True]
    inference = str(ROOT / "tests" / "configs" / "eks-inference-only.yaml")
    path = _pipeline_file(tmp_path, environments=[{"config": inference}])
    loaded, [cfg] = load_pipeline(path)
    assert gate_enabled(loaded.environments[0], cfg) is False  # no training GPUs: off by default
    path = _pipeline_file(tmp_path, environments=[{"config": inference, "accept": {"gate": True}}])
    assert _load_problems(path) == [
        f"{path}: environments[0].accept.gate: true, but {inference} has no training group with GPUs and nodes:"
        " the acceptance jobs need GPUs; set gate: false or leave it out"
    ]
    path = _pipeline_file(tmp_path, environments=[{"config": str(ROOT / "config" / "dev.yaml"), "accept": {"gate": False}}])
    loaded, [cfg] = load_pipeline(path)
    assert gate_enabled(loaded.environments[0], cfg) is False


def test_a_slurm_gate_without_lustre_is_refused(tmp_path: Path) -> None:
    """HyperPod Slurm without storage.lustre: the acceptance jobs would have no folder every node sees
    (`fminfra accept` refuses it too), so a gate on it fails validation; gate: false passes."""
    data = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    del data["storage"]["lustre"]
    config = tmp_path / "nolustre.yaml"
    config.write_text(yaml.safe_dump(data))
    for accept in ({}, {"gate": True}):  # on by default (training GPUs), or set
        path = _pipeline_file(tmp_path, environments=[{"config": str(config), "accept": accept}])
        assert _load_problems(path) == [
            f"{path}: environments[0].accept.gate: the gate is on, but {config}: storage.lustre: not set, and HyperPod Slurm nodes"
            " then share no file system (fminfra mounts only FSx for Lustre, at /fsx): the acceptance jobs run from a folder every"
            " node sees: add storage.lustre, or leave the environment out of the gate (accept: {gate: false} in pipeline.yaml)"
        ]
    path = _pipeline_file(tmp_path, environments=[{"config": str(config), "accept": {"gate": False}}])
    assert _load_problems(path) == []
    eks = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    del eks["storage"]["lustre"]  # HyperPod EKS reads its results from the pods' logs: no shared folder needed
    config.write_text(yaml.safe_dump(eks))
    path = _pipeline_file(tmp_path, environments=[{"config": str(config), "accept": {"runs_on": ["self-hosted"]}}])
    assert _load_problems(path) == []


def test_an_ec2_environment_is_not_gated(tmp_path: Path) -> None:
    """`fminfra accept` does not reach ec2 Auto Scaling groups: the gate defaults to off there, and gate: true is one line."""
    from fminfra.config.pipeline import gate_enabled

    ec2 = str(ROOT / "examples" / "ec2-odcr.yaml")
    path = _pipeline_file(tmp_path, environments=[{"config": ec2}])
    loaded, [cfg] = load_pipeline(path)
    assert cfg.compute.orchestrator == "ec2" and gate_enabled(loaded.environments[0], cfg) is False
    path = _pipeline_file(tmp_path, environments=[{"config": ec2, "accept": {"gate": True}}])
    assert _load_problems(path) == [
        f"{path}: environments[0].accept.gate: true, but {ec2} uses orchestrator ec2, which `fminfra accept` does not reach"
        " (allowed: slurm, eks); set gate: false or leave it out"
    ]


def test_synth_step_runs_make_test(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    build = next(s for s in _stages(template) if s["Name"] == "Build")
    commands = json.loads(_buildspec(template, build["Actions"][0]))["phases"]["build"]["commands"]
    assert commands == ["make test", "make synth-pipeline PIPELINE_FILE=pipeline.yaml"]


def test_source_is_the_codeconnections_repository(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    source = _stages(template)[0]["Actions"][0]
    assert source["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    configured = yaml.safe_load((ROOT / "pipeline.yaml").read_text())["source"]
    assert source["Configuration"]["ConnectionArn"] == configured["connection_arn"]
    assert source["Configuration"]["FullRepositoryId"] == configured["repository"]


def _projects(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == "AWS::CodeBuild::Project"}


def test_pipeline_is_v2_and_every_build_chooses_its_runtimes(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    """V2 explicitly (aws-cdk-lib's default is V1 without the feature flag); every CodeBuild
    project, the generated self-mutation and asset projects too, on standard 8.0 with Node.js 22
    (docs/facts/pipeline.md#codebuild-standard-image-runtimes)."""
    _, _, template = pipeline
    (pl,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"]
    assert pl["Properties"]["PipelineType"] == "V2"
    projects = _projects(template)
    assert len(projects) >= 5  # synth, three checks, self-mutation, asset publishing
    for lid, project in projects.items():
        assert project["Properties"]["Environment"]["Image"] == "aws/codebuild/standard:8.0", lid
        spec = json.loads(project["Properties"]["Source"]["BuildSpec"])
        assert spec["phases"]["install"]["runtime-versions"] == {"nodejs": "22", "python": "3.11"}, lid


def connection_grant_problems(template: dict[str, Any], connection_arn: str) -> list[str]:
    """IAM matches an action's service prefix to the resource's: a `codeconnections` ARN needs
    `codeconnections:UseConnection` (docs/facts/pipeline.md#codeconnections-iam-prefix)."""
    prefix = connection_arn.split(":")[2]
    granted = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if f"{prefix}:UseConnection" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]) and s["Resource"] == connection_arn
    ]
    return [] if granted else [f"no {prefix}:UseConnection on {connection_arn}"]


def test_source_action_may_use_a_codeconnections_connection(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    arn = yaml.safe_load((ROOT / "pipeline.yaml").read_text())["source"]["connection_arn"]
    assert arn.startswith("arn:aws:codeconnections:")
    assert connection_grant_problems(template, arn) == []
    # the test of the test: what aws-cdk-lib grants on its own
    bare = json.loads(json.dumps(template).replace('"codeconnections:UseConnection", ', ""))
    assert connection_grant_problems(bare, arn) == [f"no codeconnections:UseConnection on {arn}"]


def test_every_build_command_runs_in_the_projects_environment(pipeline: tuple[PipelineStack, Path, dict[str, Any]], tmp_path: Path) -> None:
    """The Synth and Check steps' commands, as CodeBuild runs them: one fresh shell per build,
    PATH without the project's .venv, not root, CodeBuild's container credentials pointing at a
    dead endpoint (`make test` is this suite, so it is not run again)."""
    from tests.app.test_workflows import ENVIRONMENT_FAILURES, CiSandbox, make_ci_sandbox, unmanaged_commands

    for marker in (ROOT / ".venv" / ".installed", ROOT / "node_modules" / ".installed"):
        if not marker.is_file():
            pytest.skip(f"{marker.relative_to(ROOT)} missing: run `make setup` first")
    _, _, template = pipeline
    build = next(s for s in _stages(template) if s["Name"] == "Build")
    synth_commands = json.loads(_buildspec(template, build["Actions"][0]))["phases"]["build"]["commands"]
    dev = next(s for s in _stages(template) if s["Name"] == "dev")
    check = next(a for a in dev["Actions"] if a["Name"] == "Check-dev")
    check_project = _projects(template)[check["Configuration"]["ProjectName"]["Ref"]]
    check_commands = json.loads(check_project["Properties"]["Source"]["BuildSpec"])["phases"]["build"]["commands"]
    check_env = {v["Name"]: v["Value"] for v in check_project["Properties"]["Environment"]["EnvironmentVariables"]}
    accept_action = next(a for a in dev["Actions"] if a["Name"] == "Accept-dev")
    accept_project = _projects(template)[accept_action["Configuration"]["ProjectName"]["Ref"]]
    accept_commands = json.loads(accept_project["Properties"]["Source"]["BuildSpec"])["phases"]["build"]["commands"]
    accept_env = {v["Name"]: v["Value"] for v in accept_project["Properties"]["Environment"]["EnvironmentVariables"]}
    for command in [*synth_commands, *check_commands, *accept_commands]:
        assert unmanaged_commands(command) == [], command
    ci = make_ci_sandbox(tmp_path)
    result = ci.run("\n".join(c for c in synth_commands if c != "make test"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert not ENVIRONMENT_FAILURES.search(result.stdout + result.stderr)
    assert (ci.root / "cdk.out" / "fminfra-pipeline.template.json").is_file()
    # The Check and Accept builds side by side, as two builds: each a fresh shell in a source folder of
    # its own holding the synth's output (both write $CODEBUILD_SRC_DIR/.aws-target-config), and both
    # wait on the dead endpoint.
    accept_root = tmp_path / "accept-src"
    shutil.copytree(ci.root, accept_root, symlinks=True)
    accept_ci = CiSandbox(root=accept_root, env={**ci.env, "CODEBUILD_SRC_DIR": str(accept_root)}, log=ci.log)
    with ThreadPoolExecutor(max_workers=2) as pool:
        check_run = pool.submit(ci.run, "\n".join(check_commands), **check_env)
        accept_run = pool.submit(accept_ci.run, "\n".join(accept_commands), **accept_env)
        result, accept = check_run.result(), accept_run.result()
    output = result.stdout + result.stderr
    assert not ENVIRONMENT_FAILURES.search(output), output[-3000:]
    assert result.returncode != 0 and "credentials" in output, output[-3000:]  # the dead endpoint
    result = accept  # the acceptance gate, the same way
    output = result.stdout + result.stderr
    assert not ENVIRONMENT_FAILURES.search(output), output[-3000:]
    assert result.returncode != 0 and "credentials" in output and "accept-remote: " in output, output[-3000:]


def test_pipeline_deploys_the_same_templates_as_the_standalone_app(
    pipeline: tuple[PipelineStack, Path, dict[str, Any]], synth: Synth
) -> None:
    """Same stack names and identical templates: moving an environment onto the pipeline replaces nothing."""
    _, outdir, _ = pipeline
    for env in ("dev", "staging", "prod"):
        in_pipeline = guard.read_templates(outdir, env)
        standalone = guard.read_templates(synth.outdir, env)
        assert sorted(in_pipeline) == sorted(standalone)
        for name in standalone:
            assert in_pipeline[name]["Resources"] == standalone[name]["Resources"], name


def test_policy_gates_on_the_pipeline(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, outdir, _ = pipeline
    report = json.loads((outdir / "validation-report.json").read_text())
    nag = next(p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions")
    assert nag["violations"] == []
    templates = sorted(outdir.glob("*.template.json"))
    assert len(templates) == 2  # the pipeline, and its support stack for prod's region (us-east-1)
    config = outdir / "lint.yaml"
    config.write_text(yaml.safe_dump({"ignore_checks": list(PIPELINE_CFN_LINT_IGNORED)}))
    code, output = cfn_lint(templates, config)
    assert code == 0, output


def _pipeline_file(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    data["environments"] = [{**e, "config": str(ROOT / e["config"])} for e in data["environments"]]
    data.update(changes)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"account": 444444444444}, "account: must be a quoted string of 12 digits (YAML reads an unquoted number as an integer)"),
        ({"source": {"connection_arn": "arn:aws:s3:::x", "repository": "a/b"}}, "source.connection_arn: must be arn:aws:codeconnections:"),
        ({"stages": []}, "stages: unknown field"),
        (
            {"environments": [{"config": "config/nope.yaml"}]},
            "environments[0].config: no such file 'config/nope.yaml' (paths are relative to the folder of pipeline.yaml, ",
        ),
        ({"environments": [{"config": "a.yaml"}, {"config": "a.yaml"}]}, "environments: each config once, repeated: a.yaml"),
        ({"environments": []}, "environments: List should have at least 1 item"),
    ],
)
def test_bad_pipeline_file_is_one_line_per_problem(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    path = _pipeline_file(tmp_path, **changes)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(f"{path}: ")
    assert message in info.value.problems[0]


def test_app_with_a_bad_pipeline_file_exits_2_without_traceback(tmp_path: Path) -> None:
    path = _pipeline_file(tmp_path, region="us-west-9")
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"pipeline": str(path)}), "CDK_OUTDIR": str(tmp_path / "out")}
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{path}: region: unknown region 'us-west-9'")
    assert "Traceback" not in result.stderr


def test_a_docker_hub_secret_logs_every_build_in(tmp_path: Path) -> None:
    """Serving read 1, B2: the EFA image's base comes from Docker Hub, whose anonymous pulls CodeBuild's shared
    addresses exhaust; with docker_hub_secret_arn the pipeline's builds read that secret (CDK Pipelines'
    docker_credentials). A secret elsewhere, or a partial ARN, is one clear line."""
    from fminfra.app.pipeline import build_pipeline_app

    arn = "arn:aws:secretsmanager:us-west-2:444444444444:secret:dockerhub-AbCdEf"
    path = _pipeline_file(tmp_path, docker_hub_secret_arn=arn, environments=[{"config": str(ROOT / "config" / "dev.yaml")}])
    loaded, _ = load_pipeline(path)
    assert loaded.docker_hub_secret_arn == arn
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(tmp_path / "out"), context=context)
    stack = build_pipeline_app(app, path)
    app.synth()
    template = json.loads((tmp_path / "out" / f"{stack.artifact_id}.template.json").read_text())
    reads = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert reads and all(s["Resource"] == arn for s in reads)
    for bad, message in (
        ("arn:aws:secretsmanager:us-west-2:444444444444:secret:dockerhub", "must be a Secrets Manager secret's complete ARN"),
        ("arn:aws:secretsmanager:us-east-1:444444444444:secret:dockerhub-AbCdEf", "docker_hub_secret_arn is in 444444444444, us-east-1"),
    ):
        problems = _load_problems(_pipeline_file(tmp_path, docker_hub_secret_arn=bad))
        assert len(problems) == 1 and message in problems[0], problems


def serving_gate_problems(stack: PipelineStack, env: str) -> list[str]:
    """The serving gate of an environment with models: a manual approval (CodeBuild cannot reach the
    internal load balancers) that names the command and approves only on exit 0, after the deploy."""
    approval = stack.serving_approvals.get(env)
    if approval is None:
        return [f"{env}: no serving gate"]
    problems = []
    comment = approval.comment or ""
    if f"fminfra accept config/{env}.yaml --serving" not in comment:
        problems.append(f"{env}: the approval does not name `fminfra accept config/{env}.yaml --serving`")
    if "Approve only if it exits 0" not in comment:
        problems.append(f"{env}: the approval does not say 'Approve only if it exits 0'")
    if approval not in stack.waves[env].post:
        problems.append(f"{env}: the serving gate is not after the deploy")
    return problems


def test_an_environment_with_models_gets_a_serving_gate(tmp_path: Path) -> None:
    import aws_cdk as cdk

    source = {
        "connection_arn": "arn:aws:codeconnections:us-west-2:777777777777:connection/0f0f0f0f-0f0f-0f0f-0f0f-0f0f0f0f0f0f",
        "repository": "a/b",
    }
    serving = {"config": str(ROOT / "examples" / "serving.yaml"), "accept": {"runs_on": ["self-hosted"]}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"account": "777777777777", "region": "us-west-2", "source": source, "environments": [serving]}))
    pipeline_config, configs = load_pipeline(path)
    app = cdk.App(context=json.loads((ROOT / "cdk.json").read_text())["context"])
    stack = PipelineStack(app, "P", pipeline_config=pipeline_config, environments=configs)
    assert serving_gate_problems(stack, "serve") == []
    assert stack.accept_steps == {} and stack.accept_approvals == {}  # no training GPUs: no acceptance gate
    # the test of the test: an approval without the command, and a pipeline whose environments serve nothing
    from aws_cdk import pipelines

    stack.serving_approvals["serve"] = pipelines.ManualApprovalStep("ServingGate-serve", comment="Approve?")
    assert serving_gate_problems(stack, "serve") == [
        "serve: the approval does not name `fminfra accept config/serve.yaml --serving`",
        "serve: the approval does not say 'Approve only if it exits 0'",
        "serve: the serving gate is not after the deploy",
    ]


def test_environments_without_models_get_no_serving_gate(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    stack, _, _ = pipeline
    assert stack.serving_approvals == {}
    assert serving_gate_problems(stack, "dev") == ["dev: no serving gate"]
