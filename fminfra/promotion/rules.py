"""Promotion's rules: the repositories and connections the pipelines name, and the names of the roles
promotion creates in each account, which other stacks, the workflows and the pipeline need (the GitHub
OIDC stacks in `stack` create the roles)."""

from __future__ import annotations

import re

from fminfra.core.errors import ValidationError
from fminfra.storage.rules import FSX_MOUNT

# The CDK bootstrap qualifier every target account uses, CDK's default: the bootstrap roles' and the
# asset bucket's names carry it (docs/facts/pipeline.md#cdk-bootstrap-qualifier).
BOOTSTRAP_QUALIFIER = "hnb659fds"

# pipeline.yaml's source: a CodeConnections (or CodeStar Connections) connection and the owner/name of its repository.
CONNECTION_ARN_RULE = re.compile(
    r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):connection/[0-9a-f-]{36}$"
)
CONNECTION_REPOSITORY_RULE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# pipeline.yaml's Docker Hub credential: a Secrets Manager secret's complete ARN (its name and the 6
# characters Secrets Manager appends), holding JSON {"username": ..., "secret": ...}
# (docs/facts/pipeline.md#cdk-pipelines-docker-credentials).
DOCKER_HUB_SECRET_ARN_RULE = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$"
)

# The repository as the `sub` claim of its tokens names it, trusted exactly as given: the prefix
# GitHub gives for the repository (`gh api repos/OWNER/REPO/actions/oidc/customization/sub --jq
# .sub_claim_prefix`, or the start of a real token's `sub`), with or without its leading `repo:`.
# GitHub's sources show `OWNER/NAME`, and for immutable subject claims `OWNER@OWNER_ID/NAME@REPO_ID`
# (its OIDC reference) or `OWNER-OWNER_ID/NAME-REPO_ID` (its 2026-04-23 changelog): they conflict
# (docs/facts/pipeline.md#github-oidc-subject-claims, docs/facts/pipeline.md#github-oidc-subject-prefix-endpoint),
# so nothing here builds or rewrites the prefix. The `-` form is a name form to this rule.
REPOSITORY_RULE = re.compile(r"^[A-Za-z0-9_.-]+(@[0-9]+)?/[A-Za-z0-9_.-]+(@[0-9]+)?$")
PREFIX_COMMAND = "gh api repos/OWNER/REPO/actions/oidc/customization/sub --jq .sub_claim_prefix"
REPOSITORY_FORMS = (
    "the subject prefix GitHub gives for the repository, as `" + PREFIX_COMMAND + "` prints it "
    "(OWNER/NAME, OWNER@OWNER_ID/NAME@REPO_ID with both ids, digits only, or OWNER-OWNER_ID/NAME-REPO_ID; "
    "a leading repo: is allowed)"
)


def subject_repository(repository: str) -> str:
    """The repository part of the subjects the roles trust, exactly as given (less a leading
    `repo:`); ValidationError (one line) on anything GitHub's subjects cannot hold."""
    value = repository.removeprefix("repo:")
    match = REPOSITORY_RULE.match(value)
    if not match or (match.group(1) is None) != (match.group(2) is None):
        raise ValidationError(f"repository must be OWNER/NAME, got {repository!r}: allowed: {REPOSITORY_FORMS}", path="repository")
    return value


def deploy_role_name(env: str) -> str:
    """Name of the role the deploy workflow assumes for an environment (the workflows use it)."""
    return f"fminfra-{env}-github-deploy"


def accept_role_name(env: str) -> str:
    """The role the acceptance gate assumes in an environment's account (workflow and pipeline)."""
    return f"fminfra-{env}-accept"


def accept_step_role_name(pipeline_name: str, env: str) -> str:
    """Name of the CDK pipeline's acceptance-step role (fminfra/app/pipeline.py) in the pipeline account."""
    return f"{pipeline_name}-{env}-accept-step"


def accept_folder_problem(orchestrator: str, has_lustre: bool) -> str | None:
    """Where the acceptance jobs cannot run, as `FIELD: reason` (None where they can). On HyperPod
    Slurm they run from one folder every node sees (scripts in, results out: FSX_MOUNT/fminfra-accept/RUN,
    fminfra/ops/accept/slurm.py); fminfra's lifecycle mounts FSx for Lustre there and nothing without
    storage.lustre (scripts/lifecycle/on_create.sh, docs/compute.md). HyperPod EKS needs none: the
    scripts travel in a ConfigMap and the results come back in the pods' logs (ops/accept/manifests.py)."""
    if orchestrator != "slurm" or has_lustre:
        return None
    return (
        "storage.lustre: not set, and HyperPod Slurm nodes then share no file system"
        f" (fminfra mounts only FSx for Lustre, at {FSX_MOUNT}):"
        " the acceptance jobs run from a folder every node sees: add storage.lustre, or leave the environment out of the gate"
        " (accept: {gate: false} in pipeline.yaml)"
    )
