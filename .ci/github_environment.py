#!/usr/bin/env python3
"""Refuse to deploy to a GitHub environment that lacks the protection pipeline.yaml asks for.

GitHub environments fail open: a job that names an environment which does not exist creates it,
with no protection rules, and required reviewers are only available on some plans for private
repositories (docs/facts/pipeline.md#github-environment-protection-plans). The deploy job runs
this first, before it asks AWS for any credentials, and stops (exit 1) unless, through GitHub's
REST API (docs/facts/pipeline.md#github-rest-get-environment):

- the environment exists;
- its deployment branches are restricted to exactly the pipeline's branch (`source.branch` of
  pipeline.yaml, normally `main`) through a custom branch policy
  (docs/facts/pipeline.md#github-rest-deployment-branch-policies);
- where pipeline.yaml sets `approval: true` for the environment: a `required_reviewers` rule with
  at least one reviewer and `prevent_self_review` on.

Exit 0: protected as asked; 1: refused (one line per missing protection); 2: bad input (no token,
no repository, unknown environment, unreachable API): also a refusal, never a pass.
Environment: GITHUB_TOKEN (the job's token, with `actions: read`), GITHUB_REPOSITORY (owner/name),
GITHUB_API_URL (default https://api.github.com).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script from the repository root (`make github-environment-check`): the project's own
# pipeline.yaml reader is importable from there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

API_VERSION = "2022-11-28"  # docs/facts/pipeline.md#github-rest-get-environment

# GET path -> (HTTP status, decoded JSON body or None)
Fetch = Callable[[str], tuple[int, Any]]


@dataclass(frozen=True)
class Requirement:
    """What an environment must have before the deploy job may assume its role."""

    environment: str
    branch: str
    reviewers: bool


def requirement_from_pipeline(pipeline_file: Path, environment: str) -> Requirement:
    """The protection pipeline.yaml asks for: its branch, and reviewers where `approval: true`."""
    from fminfra.config.pipeline import load_pipeline

    pipeline, configs = load_pipeline(pipeline_file)
    for entry, cfg in zip(pipeline.environments, configs, strict=True):
        if cfg.name == environment:
            return Requirement(environment=environment, branch=pipeline.source.branch, reviewers=entry.approval)
    names = ", ".join(c.name for c in configs)
    raise LookupError(f"{pipeline_file}: environments: no environment named {environment!r} (have: {names})")


def _refusal(status: int, what: str) -> str:
    if status == 404:
        return f"{what}: not found (HTTP 404)"
    if status in (401, 403):
        return f"{what}: HTTP {status}: the job's token cannot read it (the deploy job needs `permissions: actions: read`)"
    return f"{what}: HTTP {status}"


def check(req: Requirement, repository: str, fetch: Fetch) -> tuple[list[str], list[str]]:
    """(problems, notes) for one environment; no problems means it is protected as asked."""
    env_path = f"/repos/{repository}/environments/{urllib.parse.quote(req.environment, safe='')}"
    where = f"GitHub environment {req.environment!r} of {repository}"
    status, env = fetch(env_path)
    if status == 404:
        return [
            f"{where} does not exist: create it (Settings > Environments) with the protection in docs/promotion.md before the first deploy"
        ], []
    if status != 200 or not isinstance(env, dict):
        return [f"{where}: {_refusal(status, 'GET ' + env_path)}"], []
    problems: list[str] = []
    notes: list[str] = []

    policy = env.get("deployment_branch_policy")
    if not policy:
        problems.append(f"{where}: deployment branches are not restricted (deployment_branch_policy is null): allow only {req.branch!r}")
    elif policy.get("protected_branches"):
        problems.append(
            f"{where}: deployment branches are 'protected branches' (any protected branch may deploy): allow only {req.branch!r}"
        )
    elif policy.get("custom_branch_policies"):
        status, body = fetch(f"{env_path}/deployment-branch-policies?per_page=100")
        if status != 200 or not isinstance(body, dict):
            problems.append(f"{where}: {_refusal(status, 'GET ' + env_path + '/deployment-branch-policies')}")
        else:
            policies = [(p.get("name"), p.get("type", "branch")) for p in body.get("branch_policies") or []]
            if policies != [(req.branch, "branch")]:
                shown = ", ".join(f"{t} {n!r}" for n, t in policies) or "none"
                problems.append(f"{where}: deployment branch policies must be exactly branch {req.branch!r}, got: {shown}")
    else:
        problems.append(f"{where}: deployment_branch_policy restricts nothing: allow only {req.branch!r}")

    rules = [r for r in env.get("protection_rules") or [] if isinstance(r, dict)]
    reviewers = [r for r in rules if r.get("type") == "required_reviewers"]
    if req.reviewers:
        if not reviewers or not any(r.get("reviewers") for r in reviewers):
            problems.append(
                f"{where}: no required reviewers, and pipeline.yaml sets approval: true for it "
                "(private repositories need a plan that offers them)"
            )
        elif not all(r.get("prevent_self_review") for r in reviewers):
            problems.append(f"{where}: required reviewers may approve their own runs: turn on 'Prevent self-review'")
        if env.get("can_admins_bypass", True):
            notes.append(f"{where}: administrators may bypass its protection rules (can_admins_bypass); turn it off to hold admins too")
    return problems, notes


def github_fetch(api_url: str, token: str) -> Fetch:
    """GET against GitHub's REST API with the job's token."""

    def fetch(path: str) -> tuple[int, Any]:
        request = urllib.request.Request(  # noqa: S310 - the URL is GitHub's API (https) from the runner's environment
            api_url.rstrip("/") + path,
            headers={"Accept": "application/vnd.github+json", "Authorization": f"Bearer {token}", "X-GitHub-Api-Version": API_VERSION},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, None

    return fetch


def main(argv: list[str] | None = None, fetch: Fetch | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--environment", required=True, help="GitHub environment = fminfra environment name")
    parser.add_argument("--pipeline", default="pipeline.yaml", type=Path, help="pipeline.yaml (branch, approvals)")
    ns = parser.parse_args(argv)
    repository = os.environ.get("GITHUB_REPOSITORY", "")
    if "/" not in repository:
        print(
            "github-environment-check: GITHUB_REPOSITORY must be OWNER/NAME (GitHub Actions sets it); refusing to deploy", file=sys.stderr
        )
        return 2
    try:
        req = requirement_from_pipeline(ns.pipeline, ns.environment)
    except LookupError as exc:
        print(f"{exc}; refusing to deploy", file=sys.stderr)
        return 2
    except Exception as exc:  # ConfigError: one line per problem
        problems = getattr(exc, "problems", None) or [str(exc)]
        print("\n".join(problems) + "\n(refusing to deploy)", file=sys.stderr)
        return 2
    if fetch is None:
        token = os.environ.get("GITHUB_TOKEN", "")
        if not token:
            print("github-environment-check: GITHUB_TOKEN is not set (pass the job's token); refusing to deploy", file=sys.stderr)
            return 2
        fetch = github_fetch(os.environ.get("GITHUB_API_URL") or "https://api.github.com", token)
    try:
        problems, notes = check(req, repository, fetch)
    except (OSError, ValueError) as exc:
        print(f"github-environment-check: GitHub's API did not answer ({exc}); refusing to deploy", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}")
    if problems:
        print("\n".join(f"refused: {p}" for p in problems), file=sys.stderr)
        return 1
    asked = f"branch {req.branch!r} only" + (", required reviewers, no self-review" if req.reviewers else "")
    print(f"GitHub environment {req.environment!r} of {repository}: protected as pipeline.yaml asks ({asked})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
