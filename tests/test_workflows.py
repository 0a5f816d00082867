"""GitHub Actions: the workflow files (schema + structure) and the account-level OIDC stacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from fminfra.commands.gate import cfn_lint
from fminfra.core.errors import ValidationError
from fminfra.stacks.github_oidc import GithubOidcStack, github_oidc_stacks
from tests.conftest import GITHUB_REPOSITORY, ROOT, SHIPPED_NAMES, Synth

WORKFLOWS = ROOT / ".github" / "workflows"
REPO = GITHUB_REPOSITORY


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True
    data["on"] = data.pop(True, data.get("on"))
    return data


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps") or [])


def _runs(job: dict[str, Any]) -> list[str]:
    return [s["run"] for s in _steps(job) if "run" in s]


def test_workflows_match_the_github_workflow_schema() -> None:
    """SchemaStore's github-workflow schema, as vendored by check-jsonschema (actionlint's wheel
    downloads a binary at install time, which this project cannot do)."""
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["deploy-environment.yml", "deploy.yml", "pull-request.yml"]
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_can_fail(tmp_path: Path) -> None:
    bad = _load("deploy.yml")
    bad["jobs"]["dev"]["runs-on"] = "ubuntu-24.04"  # a reusable-workflow call cannot also have runs-on
    bad["jobs"]["synth"]["steps"][0]["usess"] = "actions/checkout@v4"
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(bad))
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1


@pytest.mark.parametrize("name", ["pull-request.yml", "deploy.yml", "deploy-environment.yml"])
def test_structure_every_workflow(name: str) -> None:
    wf = _load(name)
    jobs = wf["jobs"]
    text = (WORKFLOWS / name).read_text()
    # no long-lived keys anywhere: credentials only through OIDC
    assert not re.search(r"aws-access-key-id|aws-secret-access-key|AWS_SECRET_ACCESS_KEY|secrets\.", text)
    assert wf["permissions"]["contents"] == "read"
    for job_id, job in jobs.items():
        assert ("uses" in job) != ("runs-on" in job), job_id
        for need in [job["needs"]] if isinstance(job.get("needs"), str) else job.get("needs") or []:
            assert need in jobs, (job_id, need)
        for step in _steps(job):
            assert ("uses" in step) != ("run" in step), (job_id, step)
            if "uses" in step and not step["uses"].startswith("./"):
                assert re.match(r"^[\w.-]+/[\w.-]+@(v\d+|[0-9a-f]{40})$", step["uses"]), step["uses"]
        uses_aws = any("configure-aws-credentials" in s.get("uses", "") for s in _steps(job))
        if uses_aws:
            assert job.get("permissions", wf["permissions"]).get("id-token") == "write", job_id


def test_pull_requests_run_make_test_and_diff_each_environment_into_the_summary() -> None:
    wf = _load("pull-request.yml")
    assert "pull_request" in wf["on"]
    assert "make test" in _runs(wf["jobs"]["test"])
    diff = wf["jobs"]["diff"]
    assert diff["needs"] == "test"
    assert sorted(diff["strategy"]["matrix"]["environment"]) == sorted(SHIPPED_NAMES)
    runs = "\n".join(_runs(diff))
    assert 'cdk diff --no-notices --app cdk.out "${ENVIRONMENT}/*"' in runs
    assert runs.count('>> "$GITHUB_STEP_SUMMARY"') >= 2
    assert 'fminfra guard "config/${ENVIRONMENT}.yaml" --templates cdk.out --deployed' in runs
    roles = [s["with"]["role-to-assume"] for s in _steps(diff) if "configure-aws-credentials" in s.get("uses", "")]
    assert roles[0].endswith(":role/fminfra-github-diff")
    assert "cdk-hnb659fds-lookup-role" in roles[1]


def test_main_promotes_one_artifact_dev_then_staging_then_prod() -> None:
    wf = _load("deploy.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    jobs = wf["jobs"]
    assert "make test" in _runs(jobs["synth"])
    assert any("cdk synth" in r and "-o cdk.out" in r for r in _runs(jobs["synth"]))
    assert [jobs[e]["needs"] for e in ("dev", "staging", "prod")] == ["synth", "dev", "staging"]
    for env in ("dev", "staging", "prod"):
        assert jobs[env]["uses"] == "./.github/workflows/deploy-environment.yml"
        assert jobs[env]["with"] == {"environment": env}
        assert jobs[env]["permissions"]["id-token"] == "write"
    assert wf["concurrency"]["cancel-in-progress"] is False


def test_each_environment_runs_in_its_github_environment_with_checks_before_deploy() -> None:
    wf = _load("deploy-environment.yml")
    assert wf["on"]["workflow_call"]["inputs"]["environment"]["required"] is True
    job = wf["jobs"]["deploy"]
    # the GitHub environment's protection rules (required reviewers) gate this job
    assert job["environment"] == "${{ inputs.environment }}"
    steps = _steps(job)
    names = [s.get("name", s.get("uses", s.get("run"))) for s in steps]
    runs = [s.get("run", "") for s in steps]
    preflight = next(i for i, r in enumerate(runs) if "fminfra preflight" in r)
    guard = next(i for i, r in enumerate(runs) if "fminfra guard" in r and "--deployed" in r)
    deploy = next(i for i, r in enumerate(runs) if "cdk deploy" in r)
    assert preflight < deploy and guard < deploy, names
    assert "--app cdk.out" in runs[deploy]  # the artifact the synth job built, not a new synth
    download = next(i for i, s in enumerate(steps) if "download-artifact" in s.get("uses", ""))
    assert download < guard
    creds = [(i, s["with"]) for i, s in enumerate(steps) if "configure-aws-credentials" in s.get("uses", "")]
    deploy_role = "role/fminfra-${{ inputs.environment }}-github-deploy"
    assert creds[0][1]["role-to-assume"].endswith(deploy_role)
    assert creds[1][1]["role-chaining"] is True and "lookup-role" in creds[1][1]["role-to-assume"]
    assert creds[1][0] < preflight
    assert preflight < creds[2][0] < deploy and creds[2][1]["role-to-assume"].endswith(deploy_role)


# --------------------------------------------------------------------------------------------
# the account-level OIDC stacks


@pytest.fixture(scope="module")
def oidc(oidc_synth: tuple[list[GithubOidcStack], Path]) -> tuple[list[GithubOidcStack], Path]:
    return oidc_synth  # synthesized once per session in tests/conftest.py


def _template(outdir: Path, stack: GithubOidcStack) -> dict[str, Any]:
    return json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())


def test_one_stack_per_account_with_one_provider(oidc: tuple[list[GithubOidcStack], Path], synth: Synth) -> None:
    stacks, outdir = oidc
    accounts = sorted({synth.configs[n].account for n in SHIPPED_NAMES})
    assert [s.stack_name for s in stacks] == [f"fminfra-github-oidc-{a}" for a in accounts]
    for stack in stacks:
        resources = _template(outdir, stack)["Resources"].values()
        providers = [r for r in resources if r["Type"] == "AWS::IAM::OIDCProvider"]
        assert len(providers) == 1
        assert providers[0]["Properties"]["Url"] == "https://token.actions.githubusercontent.com"
        assert providers[0]["Properties"]["ClientIdList"] == ["sts.amazonaws.com"]
        assert not [r for r in resources if r["Type"] in ("AWS::IAM::User", "AWS::IAM::AccessKey") or r["Type"].startswith("Custom::")]


def test_deploy_roles_trust_only_their_github_environment_and_only_assume_cdk_roles(
    oidc: tuple[list[GithubOidcStack], Path], synth: Synth
) -> None:
    stacks, outdir = oidc
    seen = []
    for stack in stacks:
        template = _template(outdir, stack)
        roles = {r["Properties"]["RoleName"]: r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role"}
        policies = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
        for env in [n for n in SHIPPED_NAMES if synth.configs[n].account == stack.account]:
            cfg = synth.configs[env]
            role = roles[f"fminfra-{env}-github-deploy"]
            (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
            assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
            assert statement["Condition"] == {
                "StringEquals": {
                    "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                    "token.actions.githubusercontent.com:sub": f"repo:{REPO}:environment:{env}",
                }
            }
            role_id = next(lid for lid, r in template["Resources"].items() if r is role)
            (policy,) = [p for p in policies if {"Ref": role_id} in p["Properties"]["Roles"]]
            (grant,) = policy["Properties"]["PolicyDocument"]["Statement"]
            assert grant["Action"] == ["sts:AssumeRole", "sts:TagSession"]
            assert sorted(grant["Resource"]) == sorted(
                f"arn:aws:iam::{cfg.account}:role/cdk-hnb659fds-{r}-role-{cfg.account}-{cfg.region}"
                for r in ("deploy", "file-publishing", "image-publishing", "lookup")
            )
            seen.append(env)
        diff = roles["fminfra-github-diff"]
        (statement,) = diff["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"] == f"repo:{REPO}:pull_request"
    assert sorted(seen) == sorted(SHIPPED_NAMES)


def test_oidc_stacks_pass_the_policy_gates(oidc: tuple[list[GithubOidcStack], Path]) -> None:
    stacks, outdir = oidc
    # cdk-nag ran in the fixture's app.synth(), which raises on any finding; the report agrees
    report = json.loads((outdir / "validation-report.json").read_text())
    assert [v for p in report["pluginReports"] for v in p["violations"]] == []
    code, output = cfn_lint([outdir / f"{s.artifact_id}.template.json" for s in stacks], ROOT / ".cfnlintrc.yaml")
    assert code == 0, output


def test_existing_provider_is_imported_not_created(synth: Synth) -> None:
    app = cdk.App()
    (stack,) = github_oidc_stacks(app, [synth.configs["dev"]], repository=REPO, existing_provider=True)
    template = app.synth().get_stack_by_name(stack.stack_name).template
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::OIDCProvider"]
    role = next(r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role")
    principal = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Federated"]
    assert principal == "arn:aws:iam::111111111111:oidc-provider/token.actions.githubusercontent.com"


@pytest.mark.parametrize(
    ("repository", "message"),
    [("not-a-repo", "repository must be OWNER/NAME, got 'not-a-repo'"), ("a/b c", "repository must be OWNER/NAME, got 'a/b c'")],
)
def test_bad_repository_is_rejected(synth: Synth, repository: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        GithubOidcStack(cdk.App(), "x", account="111111111111", repository=repository, environments=[synth.configs["dev"]])
