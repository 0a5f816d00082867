"""The GitHub OIDC roles trust the subjects GitHub issues today.

GitHub's tokens carry `repo:OWNER/REPO:CONTEXT` for older repositories, and the owner's and the
repository's ids for repositories with immutable subject claims: `repo:OWNER@OWNER_ID/REPO@REPO_ID:CONTEXT`
in GitHub's docs and in the tokens public threads recorded, `repo:OWNER-OWNER_ID/REPO-REPO_ID:CONTEXT`
in its first changelog (docs/facts/pipeline.md#github-oidc-subject-claims: the sources conflict, so
the roles trust the prefix GitHub gives, as given: `PREFIXES` below). `issued_subject` models the `@` form;
`trusts` evaluates a role's trust policy against a token's claims as STS does for the two
condition operators the roles use. The roles are synthesized for a repository as
`gh api repos/OWNER/REPO` describes it (docs/facts/pipeline.md#github-rest-repository-ids).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from fminfra.config import load_config
from fminfra.core.errors import ValidationError
from fminfra.stacks.github_oidc import GITHUB_OIDC_HOST, github_oidc_stacks
from fminfra.synth import add_github_oidc_stacks
from tests.conftest import ROOT

# The day from which new repositories get immutable subject claims (GitHub's current OIDC pages;
# the 2026-04-23 changelog first announced June 18, 2026 and `-` as the separator).
IMMUTABLE_FROM = dt.date(2026, 7, 15)


@dataclass(frozen=True)
class Repository:
    """A repository as `gh api repos/OWNER/REPO` describes it (`.owner.login`, `.owner.id`, `.name`, `.id`)."""

    owner: str
    owner_id: int
    name: str
    repo_id: int
    created: dt.date
    opted_in: bool = False

    @property
    def immutable(self) -> bool:
        return self.opted_in or self.created > IMMUTABLE_FROM

    def as_context(self) -> str:
        """The `-c github_repository=` value docs/promotion.md gives for it."""
        if self.immutable:
            return f"{self.owner}@{self.owner_id}/{self.name}@{self.repo_id}"
        return f"{self.owner}/{self.name}"


def issued_subject(repo: Repository, context: str) -> str:
    """The `sub` GitHub puts in a job's token (context: `environment:ENV`, `pull_request`, `ref:refs/heads/B`)."""
    if repo.immutable:
        return f"repo:{repo.owner}@{repo.owner_id}/{repo.name}@{repo.repo_id}:{context}"
    return f"repo:{repo.owner}/{repo.name}:{context}"


def _matches(operator: str, actual: str, expected: str | list[str]) -> bool:
    values = [expected] if isinstance(expected, str) else expected
    if operator == "StringEquals":
        return actual in values
    if operator == "StringLike":
        return any(fnmatch.fnmatchcase(actual, v) for v in values)
    raise AssertionError(f"condition operator {operator} is not modelled")


def trusts(role: dict[str, Any], claims: dict[str, str]) -> bool:
    """Whether a role's trust policy lets a GitHub token with these claims call AssumeRoleWithWebIdentity."""
    for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
        if statement.get("Effect") != "Allow" or statement.get("Action") != "sts:AssumeRoleWithWebIdentity":
            continue
        if "Federated" not in statement.get("Principal", {}):
            continue
        conditions = statement.get("Condition", {})
        if all(
            _matches(op, claims.get(key.removeprefix(f"{GITHUB_OIDC_HOST}:"), ""), value)
            for op, pairs in conditions.items()
            for key, value in pairs.items()
        ):
            return True
    return False


def _token(repo: Repository, context: str) -> dict[str, str]:
    return {"aud": "sts.amazonaws.com", "sub": issued_subject(repo, context)}


CONFIGS = [load_config(ROOT / "config" / f"{name}.yaml") for name in ("dev", "staging", "prod")]


def _roles(repository: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Role name -> role resource of the account-level stacks synthesized for the shipped configs."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(tmp_path), context=context)
    stacks = github_oidc_stacks(app, CONFIGS, repository=repository)
    assembly = app.synth()
    roles: dict[str, dict[str, Any]] = {}
    for stack in stacks:
        for resource in assembly.get_stack_by_name(stack.stack_name).template["Resources"].values():
            if resource["Type"] == "AWS::IAM::Role":
                roles[resource["Properties"]["RoleName"]] = resource
    return roles


# A repository created today (after the cut-over): its tokens carry the ids.
NEW = Repository("example-org", 123456, "fminfra", 987654321, created=dt.date(2026, 11, 2))
# An older one, not opted in: its tokens carry the names only.
OLD = Repository("example-org", 123456, "fminfra", 111222333, created=dt.date(2025, 3, 1))


@pytest.fixture(scope="module")
def new_repo_roles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _roles(NEW.as_context(), tmp_path_factory.mktemp("oidc-new"))


def _contexts() -> dict[str, str]:
    """Role name -> the job context whose token must be accepted (docs/promotion.md)."""
    wanted = {"fminfra-github-diff": "pull_request", "fminfra-github-check": "ref:refs/heads/main"}
    for cfg in CONFIGS:
        wanted[f"fminfra-{cfg.name}-github-deploy"] = f"environment:{cfg.name}"
        wanted[f"fminfra-{cfg.name}-accept"] = f"environment:{cfg.name}"
    return wanted


def test_a_new_repositorys_tokens_are_trusted(new_repo_roles: dict[str, dict[str, Any]]) -> None:
    """The first credentials step of every job of a repository created after July 15, 2026: the
    role trusts the subject GitHub issues (the ids form), and only for its own job context."""
    wanted = _contexts()
    assert sorted(new_repo_roles) == sorted(wanted)
    for name, context in wanted.items():
        assert trusts(new_repo_roles[name], _token(NEW, context)), (name, issued_subject(NEW, context))
        for other in {c for c in wanted.values() if c != context}:
            assert not trusts(new_repo_roles[name], _token(NEW, other)), (name, other)


def test_a_recycled_name_is_not_trusted(new_repo_roles: dict[str, dict[str, Any]]) -> None:
    """What the ids are for: another repository that takes the same names later has other ids."""
    squatter = Repository("example-org", 555, "fminfra", 666, created=dt.date(2027, 1, 5))
    legacy_token = {"aud": "sts.amazonaws.com", "sub": "repo:example-org/fminfra:environment:prod"}
    for name in ("fminfra-prod-github-deploy", "fminfra-prod-accept"):
        assert not trusts(new_repo_roles[name], _token(squatter, "environment:prod"))
        assert not trusts(new_repo_roles[name], legacy_token)


def test_an_older_repository_keeps_the_name_form(tmp_path: Path) -> None:
    roles = _roles(OLD.as_context(), tmp_path)
    assert trusts(roles["fminfra-prod-github-deploy"], _token(OLD, "environment:prod"))
    # the name form cannot trust what a new repository's jobs present: the reason the ids form exists
    assert not trusts(roles["fminfra-prod-github-deploy"], _token(NEW, "environment:prod"))


def test_the_token_prefix_is_accepted_as_copied(tmp_path: Path) -> None:
    """`repo:OWNER@ID/NAME@ID`, as a token's `sub` starts, is the same repository."""
    roles = _roles(f"repo:{NEW.as_context()}", tmp_path)
    assert trusts(roles["fminfra-dev-github-deploy"], _token(NEW, "environment:dev"))


def test_the_trust_model_can_refuse(new_repo_roles: dict[str, dict[str, Any]]) -> None:
    """A test of the test: another audience, another environment, a wildcard policy."""
    role = new_repo_roles["fminfra-prod-github-deploy"]
    assert not trusts(role, {**_token(NEW, "environment:prod"), "aud": "https://github.com/example-org"})
    assert not trusts(role, _token(NEW, "environment:dev"))
    wide = json.loads(json.dumps(role))
    statement = wide["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    statement["Condition"] = {"StringLike": {f"{GITHUB_OIDC_HOST}:sub": "repo:example-org*"}}
    assert trusts(wide, _token(NEW, "environment:dev"))
    with pytest.raises(AssertionError, match="not modelled"):
        statement["Condition"] = {"ForAnyValue:StringLike": {f"{GITHUB_OIDC_HOST}:sub": "*"}}
        trusts(wide, _token(NEW, "environment:dev"))


@pytest.mark.parametrize(
    "repository",
    ["example-org@123/fminfra", "example-org/fminfra@9", "example-org@x1/fminfra@9", "example-org@/fminfra@", "a@1@2/b@3", "a/b/c"],
)
def test_a_half_or_malformed_id_form_is_one_line(repository: str) -> None:
    with pytest.raises(ValidationError) as raised:
        github_oidc_stacks(cdk.App(), CONFIGS[:1], repository=repository)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"repository must be OWNER/NAME, got {repository!r}: allowed: ")
    assert "OWNER@OWNER_ID/NAME@REPO_ID" in message


def test_the_app_takes_the_id_form_from_the_context(tmp_path: Path) -> None:
    """`npx cdk deploy -c github_repository=OWNER@ID/NAME@ID ...` as docs/promotion.md gives it."""
    context = {**json.loads((ROOT / "cdk.json").read_text())["context"], "github_repository": NEW.as_context()}
    app = cdk.App(outdir=str(tmp_path), context=context)
    add_github_oidc_stacks(app, CONFIGS[:1])
    assembly = app.synth()
    (stack,) = [s for s in assembly.stacks if s.stack_name.startswith("fminfra-github-oidc-")]
    subjects = {
        json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
        for r in stack.template["Resources"].values()
        if r["Type"] == "AWS::IAM::Role"
    }
    assert any(issued_subject(NEW, "environment:dev") in s for s in subjects), subjects
    assert not any(re.search(r"repo:example-org/fminfra:", s) for s in subjects)


# --------------------------------------------------------------------------------------------
# the acceptance role ends its own Session Manager sessions (docs/facts/iam.md#ssm-terminate-own-sessions-assumed-role)


def _allows_terminate(statement: dict[str, Any], session_arn: str, session_tag: str, userid: str) -> bool:
    """IAM's answer for one Allow statement on `ssm:TerminateSession`: the resource pattern and the
    conditions, with `${aws:userid}` substituted as IAM does."""
    resources = [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
    if not any(fnmatch.fnmatchcase(session_arn, r.replace("${aws:userid}", userid)) for r in resources):
        return False
    context = {"ssm:resourceTag/aws:ssmmessages:session-id": session_tag}
    for op, pairs in statement.get("Condition", {}).items():
        for key, value in pairs.items():
            if not _matches(op, context.get(key, ""), str(value).replace("${aws:userid}", userid)):
                return False
    return True


def _terminate_statement(tmp_path: Path) -> dict[str, Any]:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(tmp_path), context=context)
    (stack,) = github_oidc_stacks(app, CONFIGS[:1], repository=OLD.as_context())
    template = app.synth().get_stack_by_name(stack.stack_name).template
    statements = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "ssm:TerminateSession"
    ]
    assert len(statements) == 1, statements
    return statements[0]


def test_the_acceptance_role_can_end_its_own_sessions_only(tmp_path: Path) -> None:
    """For an assumed role, aws:userid is ROLE_ID:SESSION_NAME, and Session Manager tags the
    session with aws:ssmmessages:session-id of that value; the session id itself begins with the
    caller's name, never with ROLE_ID: (so `session/${aws:userid}-*` matched none of them)."""
    cfg = CONFIGS[0]
    statement = _terminate_statement(tmp_path)
    userid = "AROAEXAMPLEROLEID1234:GitHubActions"
    own = f"arn:aws:ssm:{cfg.region}:{cfg.account}:session/GitHubActions-0a1b2c3d4e5f60718"
    assert _allows_terminate(statement, own, userid, userid)
    other = f"arn:aws:ssm:{cfg.region}:{cfg.account}:session/someone-0a1b2c3d4e5f60718"
    assert not _allows_terminate(statement, other, "AROAOTHERROLEID567890:someone", userid)
    # another region's or account's sessions
    assert not _allows_terminate(statement, own.replace(cfg.region, "eu-north-1"), userid, userid)
    # the test of the test: the grant as it was matches no session of an assumed role
    before = {"Action": "ssm:TerminateSession", "Resource": f"arn:aws:ssm:{cfg.region}:{cfg.account}:session/${{aws:userid}}-*"}
    assert not _allows_terminate(before, own, userid, userid)


# --------------------------------------------------------------------------------------------
# the exact prefix GitHub gives, in every form its sources show, trusted as given
# (docs/facts/pipeline.md#github-oidc-subject-claims, docs/facts/pipeline.md#github-oidc-subject-prefix-endpoint)

PREFIXES = [
    # `sub_claim_prefix` of the repository OIDC endpoint, as Azure/azure-dev issue #9382 recorded it
    "repo:vhvb1989@24213737/ppconfig@1323153730",
    # GitHub's OIDC reference and github/docs PR #45221: `@` before each id
    "repo:octocat@123456/my-repo@456789",
    # GitHub's changelog of 2026-04-23: `-` before each id
    "repo:octocat-123456/my-repo-456789",
    # a repository without immutable subject claims
    "repo:octo-org/octo-repo",
]


def _trusted_subjects(repository: str, tmp_path: Path) -> set[str]:
    """Every `sub` value the dev account's roles trust."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(tmp_path), context=context)
    (stack,) = github_oidc_stacks(app, CONFIGS[:1], repository=repository)
    template = app.synth().get_stack_by_name(stack.stack_name).template
    found: set[str] = set()
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for statement in resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            for pairs in statement.get("Condition", {}).values():
                value = pairs.get(f"{GITHUB_OIDC_HOST}:sub")
                found.update([value] if isinstance(value, str) else value or [])
    return found


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_prefix_github_gives_is_trusted_exactly(prefix: str, tmp_path: Path) -> None:
    """`-c github_repository=` the prefix as GitHub prints it, or without `repo:`: the roles trust
    that prefix and nothing rebuilt from it."""
    wanted = {f"{prefix}:environment:dev", f"{prefix}:pull_request", f"{prefix}:ref:refs/heads/main"}
    assert _trusted_subjects(prefix, tmp_path / "as-printed") == wanted
    assert _trusted_subjects(prefix.removeprefix("repo:"), tmp_path / "bare") == wanted


def test_a_refused_repository_says_where_to_read_the_prefix() -> None:
    with pytest.raises(ValidationError) as raised:
        github_oidc_stacks(cdk.App(), CONFIGS[:1], repository="octocat@123456/my-repo")
    assert "gh api repos/OWNER/REPO/actions/oidc/customization/sub --jq .sub_claim_prefix" in str(raised.value)


def promotion_prefix_problems(text: str) -> list[str]:
    """What docs/promotion.md's OIDC section must do: have the user read the prefix from GitHub
    (the repository OIDC endpoint, or a real token's `sub`), never assemble it from ids."""
    section = text.split("## GitHub Actions with OIDC", 1)[1].split("\n## ", 1)[0]
    problems = []
    if "gh api repos/OWNER/REPO/actions/oidc/customization/sub --jq .sub_claim_prefix" not in section:
        problems.append("no command that reads sub_claim_prefix from GitHub")
    if re.search(r"\.owner\.id|\\\(\.id\)", section):
        problems.append("a recipe that builds the prefix from the ids")
    if "-c github_repository=SUB_CLAIM_PREFIX" not in section:
        problems.append("the deploy commands do not pass the prefix as read")
    return problems


def test_the_docs_read_the_prefix_from_github() -> None:
    assert promotion_prefix_problems((ROOT / "docs" / "promotion.md").read_text()) == []
    # the test of the test: the section as it was (a recipe from `gh api repos/OWNER/REPO`)
    before = (
        "## GitHub Actions with OIDC\n```bash\n"
        "gh api repos/OWNER/REPO --jq '\"\\(.owner.login)@\\(.owner.id)/\\(.name)@\\(.id)\"'\n"
        "npx cdk deploy -c github_repository=OWNER@OWNER_ID/REPO@REPO_ID fminfra-github-oidc-ACCOUNT\n```\n"
    )
    assert promotion_prefix_problems(before) == [
        "no command that reads sub_claim_prefix from GitHub",
        "a recipe that builds the prefix from the ids",
        "the deploy commands do not pass the prefix as read",
    ]
