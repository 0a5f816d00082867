"""The deploy job's environment-protection check (.ci/github_environment.py) against recorded
GitHub REST API answers, and the stack report after a failed deploy (.ci/stack_status.py).

The recorded answers follow the shapes of GitHub's REST documentation, "REST API endpoints for
deployment environments" (GET /repos/{owner}/{repo}/environments/{environment_name}: `protection_rules`
with `type` wait_timer / required_reviewers / branch_policy, `prevent_self_review`, `reviewers`;
`deployment_branch_policy` with `protected_branches` and `custom_branch_policies`, null when any
branch may deploy) and "REST API endpoints for deployment branch policies" (`total_count`,
`branch_policies` with `name` and `type`): docs/facts/pipeline.md#github-rest-get-environment and
docs/facts/pipeline.md#github-rest-deployment-branch-policies. They model what GitHub answers;
no request leaves the machine.
"""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from tests.ci import ci_script
from tests.conftest import ROOT

REPO = "example-org/fminfra"
ENV_PATH = f"/repos/{REPO}/environments/prod"
BRANCHES_PATH = f"{ENV_PATH}/deployment-branch-policies?per_page=100"


github_environment = ci_script("github_environment")
stack_status = ci_script("stack_status")

_REVIEWER = {
    "type": "User",
    "reviewer": {"login": "octocat", "id": 1, "node_id": "MDQ6VXNlcjE=", "type": "User", "site_admin": False},
}
# A protected prod: required reviewers without self-review, branches restricted to main only.
PROTECTED = {
    "id": 161088068,
    "node_id": "MDExOkVudmlyb25tZW50MTYxMDg4MDY4",
    "name": "prod",
    "url": f"https://api.github.com/repos/{REPO}/environments/prod",
    "html_url": f"https://github.com/{REPO}/deployments/activity_log?environments_filter=prod",
    "created_at": "2026-11-23T22:00:40Z",
    "updated_at": "2026-11-23T22:00:40Z",
    "can_admins_bypass": False,
    "protection_rules": [
        {"id": 3736, "node_id": "MDQ6R2F0ZTM3MzY=", "type": "wait_timer", "wait_timer": 30},
        {"id": 3755, "node_id": "MDQ6R2F0ZTM3NTU=", "prevent_self_review": True, "type": "required_reviewers", "reviewers": [_REVIEWER]},
        {"id": 3756, "node_id": "MDQ6R2F0ZTM3NTY=", "type": "branch_policy"},
    ],
    "deployment_branch_policy": {"protected_branches": False, "custom_branch_policies": True},
}
MAIN_ONLY = {
    "total_count": 1,
    "branch_policies": [{"id": 361471, "node_id": "MDE2OkdhdGVCcmFuY2hQb2xpY3kzNjE0NzE=", "name": "main", "type": "branch"}],
}
# What a workflow that names a missing environment leaves behind: no rules, any branch.
CREATED_BY_A_WORKFLOW = {**PROTECTED, "protection_rules": [], "deployment_branch_policy": None, "can_admins_bypass": True}


def _fetch(env: Any, branches: Any = MAIN_ONLY, env_status: int = 200, branches_status: int = 200) -> Any:
    calls: list[str] = []

    def fetch(path: str) -> tuple[int, Any]:
        calls.append(path)
        if path == ENV_PATH:
            return env_status, env
        if path == BRANCHES_PATH:
            return branches_status, branches
        raise AssertionError(f"unexpected request {path}")

    fetch.calls = calls  # type: ignore[attr-defined]
    return fetch


def _check(fetch: Any, *, reviewers: bool = True) -> tuple[list[str], list[str]]:
    req = github_environment.Requirement(environment="prod", branch="main", reviewers=reviewers)
    return github_environment.check(req, REPO, fetch)


def test_a_protected_environment_passes() -> None:
    fetch = _fetch(PROTECTED)
    assert _check(fetch) == ([], [])
    assert fetch.calls == [ENV_PATH, BRANCHES_PATH]


def _changed(**changes: Any) -> dict[str, Any]:
    env = copy.deepcopy(PROTECTED)
    env.update(changes)
    return env


_NO_SELF_REVIEW = _changed(
    protection_rules=[{"id": 3755, "node_id": "x", "prevent_self_review": False, "type": "required_reviewers", "reviewers": [_REVIEWER]}]
)


@pytest.mark.parametrize(
    ("fetch", "problem"),
    [
        (_fetch(CREATED_BY_A_WORKFLOW), "deployment branches are not restricted (deployment_branch_policy is null)"),
        (_fetch(CREATED_BY_A_WORKFLOW), "no required reviewers, and pipeline.yaml sets approval: true"),
        (_fetch(None, env_status=404), "does not exist: create it"),
        (_fetch(_changed(deployment_branch_policy={"protected_branches": True, "custom_branch_policies": False})), "'protected branches'"),
        (
            _fetch(PROTECTED, {"total_count": 1, "branch_policies": [{"id": 1, "node_id": "x", "name": "*", "type": "branch"}]}),
            "got: branch '*'",
        ),
        (
            _fetch(
                PROTECTED,
                {"total_count": 2, "branch_policies": [{"name": "main", "type": "branch"}, {"name": "release/*", "type": "branch"}]},
            ),
            "must be exactly branch 'main'",
        ),
        (_fetch(PROTECTED, {"total_count": 1, "branch_policies": [{"name": "main", "type": "tag"}]}), "got: tag 'main'"),
        (_fetch(_NO_SELF_REVIEW), "turn on 'Prevent self-review'"),
        (
            _fetch(_changed(protection_rules=[{"id": 1, "node_id": "x", "type": "required_reviewers", "reviewers": []}])),
            "no required reviewers",
        ),
        (_fetch(None, env_status=403), "HTTP 403: the job's token cannot read it"),
        (_fetch(PROTECTED, None, branches_status=500), "deployment-branch-policies: HTTP 500"),
    ],
)
def test_missing_protection_is_refused(fetch: Any, problem: str) -> None:
    problems, _ = _check(fetch)
    assert any(problem in p for p in problems), problems


def test_reviewers_are_required_only_where_pipeline_yaml_asks() -> None:
    dev = _changed(protection_rules=[], can_admins_bypass=True)
    assert _check(_fetch(dev), reviewers=False) == ([], [])
    problems, _ = _check(_fetch(dev), reviewers=True)
    assert len(problems) == 1 and "no required reviewers" in problems[0]


def test_admin_bypass_is_reported() -> None:
    problems, notes = _check(_fetch(_changed(can_admins_bypass=True)))
    assert problems == []
    assert notes == [
        f"GitHub environment 'prod' of {REPO}: administrators may bypass its protection rules (can_admins_bypass); turn it off to hold admins too"
    ]


def test_the_requirement_comes_from_pipeline_yaml() -> None:
    prod = github_environment.requirement_from_pipeline(ROOT / "pipeline.yaml", "prod")
    assert prod == github_environment.Requirement(environment="prod", branch="main", reviewers=True)
    assert github_environment.requirement_from_pipeline(ROOT / "pipeline.yaml", "dev").reviewers is False
    with pytest.raises(LookupError, match=r"no environment named 'qa' \(have: dev, staging, prod\)"):
        github_environment.requirement_from_pipeline(ROOT / "pipeline.yaml", "qa")


def _main(argv: list[str], fetch: Any, monkeypatch: pytest.MonkeyPatch, repository: str = REPO) -> tuple[int, str, str]:
    monkeypatch.setenv("GITHUB_REPOSITORY", repository)
    monkeypatch.chdir(ROOT)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = github_environment.main(argv, fetch=fetch)
    return code, out.getvalue(), err.getvalue()


def test_main_exit_codes_and_one_line_per_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _main(["--environment", "prod"], _fetch(PROTECTED), monkeypatch)
    assert (code, err) == (0, "")
    assert (
        out
        == f"GitHub environment 'prod' of {REPO}: protected as pipeline.yaml asks (branch 'main' only, required reviewers, no self-review)\n"
    )
    code, out, err = _main(["--environment", "prod"], _fetch(CREATED_BY_A_WORKFLOW), monkeypatch)
    assert code == 1
    assert [line.split(": ", 1)[0] for line in err.splitlines()] == ["refused", "refused"]
    code, _, err = _main(["--environment", "prod"], _fetch(PROTECTED), monkeypatch, repository="")
    assert code == 2 and "GITHUB_REPOSITORY must be OWNER/NAME" in err and "Traceback" not in err


def test_no_token_is_a_refusal_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.chdir(ROOT)
    err = io.StringIO()
    with redirect_stderr(err):
        assert github_environment.main(["--environment", "prod"]) == 2
    assert "GITHUB_TOKEN is not set" in err.getvalue()


def test_unreachable_api_is_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(path: str) -> tuple[int, Any]:
        raise OSError("Network is unreachable")

    code, _, err = _main(["--environment", "prod"], unreachable, monkeypatch)
    assert code == 2 and "did not answer (Network is unreachable); refusing to deploy" in err


# --------------------------------------------------------------------------------------------
# .ci/stack_status.py: what CloudFormation is still doing (botocore's Stubber checks each call
# and answer against botocore's CloudFormation model)


def test_stack_report_names_what_cloudformation_is_still_doing(tmp_path: Path) -> None:
    import boto3

    cloudformation = boto3.client("cloudformation", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(cloudformation)
    now = "2026-11-30T12:00:00Z"
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": "dev-Network", "CreationTime": now, "StackStatus": "UPDATE_COMPLETE"}]},
        {"StackName": "dev-Network"},
    )
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": "dev-Storage", "CreationTime": now, "StackStatus": "CREATE_IN_PROGRESS"}]},
        {"StackName": "dev-Storage"},
    )
    stub.add_response(
        "describe_stack_resources",
        {
            "StackResources": [
                {"LogicalResourceId": "Bucket", "ResourceType": "AWS::S3::Bucket", "Timestamp": now, "ResourceStatus": "CREATE_COMPLETE"},
                {
                    "LogicalResourceId": "LustreFileSystem",
                    "ResourceType": "AWS::FSx::FileSystem",
                    "Timestamp": now,
                    "ResourceStatus": "CREATE_IN_PROGRESS",
                },
            ]
        },
        {"StackName": "dev-Storage"},
    )
    stub.add_response(
        "describe_stack_events",
        {
            "StackEvents": [
                {
                    "StackId": "id",
                    "EventId": "e1",
                    "StackName": "dev-Storage",
                    "LogicalResourceId": "LustreFileSystem",
                    "Timestamp": now,
                    "ResourceStatus": "CREATE_IN_PROGRESS",
                    "ResourceStatusReason": "Resource creation Initiated",
                }
            ]
        },
        {"StackName": "dev-Storage"},
    )
    stub.add_client_error(
        "describe_stacks", "ValidationError", "Stack with id dev-Compute does not exist", 400, expected_params={"StackName": "dev-Compute"}
    )
    with stub:
        lines, healthy = stack_status.describe(cloudformation, ["dev-Network", "dev-Storage", "dev-Compute"], "us-west-2")
    stub.assert_no_pending_responses()
    assert healthy is False
    assert lines[0] == "dev-Network: UPDATE_COMPLETE"
    assert lines[1] == "dev-Storage: CREATE_IN_PROGRESS"
    assert lines[2] == "  still working on LustreFileSystem (AWS::FSx::FileSystem): CREATE_IN_PROGRESS"
    assert "CloudFormation continues without this job" in lines[3] and "--stack-name dev-Storage --region us-west-2" in lines[3]
    assert lines[-1] == "dev-Compute: not deployed"


def test_stack_report_without_credentials_is_one_line(tmp_path: Path, synth: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = stack_status.main(["--app", str(synth.outdir), "--environment", "dev"])
    assert code == 2
    assert err.getvalue().startswith("stack-status: cannot read the stacks of dev in us-west-2: ")
    assert len(err.getvalue().splitlines()) == 1
    assert json.loads((synth.outdir / "manifest.json").read_text())  # read, not changed
