"""The promotion pipeline: pipeline.yaml, waves in order, checks before each deploy, approval before prod."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.commands import guard
from fminfra.commands.gate import cfn_lint
from fminfra.core.errors import ConfigError
from fminfra.pipeline import PipelineStack, load_pipeline
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


def test_approval_comes_before_prod_only(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    for stage in _stages(template):
        approvals = [a for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Approval"]
        if stage["Name"] == "prod":
            assert [a["Name"] for a in approvals] == ["Approve-prod"]
            first_deploy = min(a["RunOrder"] for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Deploy")
            check = next(a for a in stage["Actions"] if a["Name"] == "Check-prod")
            assert approvals[0]["RunOrder"] < check["RunOrder"] < first_deploy
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
    assert f".venv/bin/python -m fminfra preflight {config}" in commands
    assert f".venv/bin/python -m fminfra guard {config} --templates cdk.out --deployed" in commands
    assert commands.index(f".venv/bin/python -m fminfra preflight {config}") > commands.index("make setup")


def test_checks_assume_only_the_target_accounts_lookup_role(pipeline: tuple[PipelineStack, Path, dict[str, Any]], synth: Synth) -> None:
    _, _, template = pipeline
    for env in ("dev", "staging", "prod"):
        cfg = synth.configs[env]
        lookup = f"arn:aws:iam::{cfg.account}:role/cdk-hnb659fds-lookup-role-{cfg.account}-{cfg.region}"
        project = next(
            r
            for r in template["Resources"].values()
            if r["Type"] == "AWS::CodeBuild::Project" and f"preflight config/{env}.yaml" in json.dumps(r)
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


def test_synth_step_runs_make_test(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    build = next(s for s in _stages(template) if s["Name"] == "Build")
    commands = json.loads(_buildspec(template, build["Actions"][0]))["phases"]["build"]["commands"]
    assert commands == ["make test", "npx --no-install cdk synth --quiet --no-notices -c pipeline=pipeline.yaml"]


def test_source_is_the_codeconnections_repository(pipeline: tuple[PipelineStack, Path, dict[str, Any]]) -> None:
    _, _, template = pipeline
    source = _stages(template)[0]["Actions"][0]
    assert source["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    configured = yaml.safe_load((ROOT / "pipeline.yaml").read_text())["source"]
    assert source["Configuration"]["ConnectionArn"] == configured["connection_arn"]
    assert source["Configuration"]["FullRepositoryId"] == configured["repository"]


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
        ({"environments": [{"config": "config/nope.yaml"}]}, "environments[0].config: no such file 'config/nope.yaml'"),
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
