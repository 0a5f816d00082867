"""The names of the roles promotion creates in each account, which other stacks, the workflows and
the pipeline need (the GitHub OIDC stacks in `stack` create the roles)."""

from __future__ import annotations


def deploy_role_name(env: str) -> str:
    """Name of the role the deploy workflow assumes for an environment (the workflows use it)."""
    return f"fminfra-{env}-github-deploy"


def accept_role_name(env: str) -> str:
    """The role the acceptance gate assumes in an environment's account (workflow and pipeline)."""
    return f"fminfra-{env}-accept"


def accept_step_role_name(pipeline_name: str, env: str) -> str:
    """Name of the CDK pipeline's acceptance-step role (fminfra/app/pipeline.py) in the pipeline account."""
    return f"{pipeline_name}-{env}-accept-step"
