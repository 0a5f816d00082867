"""GitHub Actions: the workflow files (schema + structure) and the account-level OIDC stacks."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from fminfra.core.errors import ValidationError
from fminfra.ops.gate import cfn_lint
from fminfra.promotion.stack import DEPLOY_SESSION_SECONDS, GithubOidcStack, github_oidc_stacks
from tests.conftest import GITHUB_REPOSITORY, PIPELINE_ACCOUNT, ROOT, SHIPPED_NAMES, Synth

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
    bad["jobs"]["synth"]["steps"][0]["usess"] = "actions/checkout@v7"
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(bad))
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1


# Actions pinned to a commit, the release tag in a comment (docs/facts/pipeline.md#github-action-pins).
ACTION_PINS = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "actions/download-artifact": ("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
    "aws-actions/configure-aws-credentials": ("e6de054238d6b7531b4efff3b6587d9aade6a06c", "v6.2.3"),
}
_USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$")


def pin_problems(text: str) -> list[str]:
    """Every external `uses:` line: OWNER/REPO@<40-hex commit> # <tag>, the pair recorded above."""
    problems = []
    for line in text.splitlines():
        m = _USES_LINE.match(line)
        if not m or m.group(1).startswith("./"):
            continue
        action, _, ref = m.group(1).partition("@")
        comment = m.group(2).strip()
        if action not in ACTION_PINS:
            problems.append(f"{action}: not a recorded action")
        elif (ref, comment) != (ACTION_PINS[action][0], f"# {ACTION_PINS[action][1]}"):
            problems.append(f"{m.group(1)} {comment}: must be {action}@{ACTION_PINS[action][0]} # {ACTION_PINS[action][1]}")
    return problems


@pytest.mark.parametrize("name", ["pull-request.yml", "deploy.yml", "deploy-environment.yml"])
def test_structure_every_workflow(name: str) -> None:
    wf = _load(name)
    jobs = wf["jobs"]
    text = (WORKFLOWS / name).read_text()
    # no long-lived keys anywhere: credentials only through OIDC
    assert not re.search(r"aws-access-key-id|aws-secret-access-key|AWS_SECRET_ACCESS_KEY|secrets\.", text)
    assert wf["permissions"]["contents"] == "read"
    assert pin_problems(text) == []
    for job_id, job in jobs.items():
        assert ("uses" in job) != ("runs-on" in job), job_id
        for need in [job["needs"]] if isinstance(job.get("needs"), str) else job.get("needs") or []:
            assert need in jobs, (job_id, need)
        for step in _steps(job):
            assert ("uses" in step) != ("run" in step), (job_id, step)
            if "run" in step:
                assert unmanaged_commands(step["run"]) == [], (job_id, step["run"])
        uses_aws = any("configure-aws-credentials" in s.get("uses", "") for s in _steps(job))
        if uses_aws:
            assert job.get("permissions", wf["permissions"]).get("id-token") == "write", job_id


def test_pin_check_can_fail() -> None:
    assert pin_problems("      - uses: actions/checkout@v4\n") == [
        "actions/checkout@v4 : must be actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1"
    ]
    assert pin_problems("- uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v6.0.0\n") != []
    assert pin_problems("- uses: someone/else@3d3c42e5aac5ba805825da76410c181273ba90b1 # v1\n") == ["someone/else: not a recorded action"]


# A CI step runs in a fresh shell: only `make TARGET` (whose exported PATH puts .venv/bin and
# node_modules/.bin first) reaches the project's Python and CDK CLI (docs/promotion.md).
_TOOL = re.compile(r"(?<![\w./-])(python3?|pip3?|npx|npm|node|cdk|\.venv/\S*|pytest|ruff)(?![\w-])")


def unmanaged_commands(run: str) -> list[str]:
    """Tools a `run:` block or build command calls directly instead of through `make`."""
    found = []
    for line in run.splitlines():
        code = line.split("#", 1)[0]
        code = re.sub(r"'[^']*'|\"[^\"]*\"", "", code)  # quoted text (echo '```diff') is not a command
        found += [m.group(1) for m in _TOOL.finditer(code)]
    return found


@pytest.mark.parametrize(
    "old",
    [
        "npx --no-install cdk synth --quiet --no-notices -o cdk.out '**'",
        '.venv/bin/python -m fminfra preflight "config/${ENVIRONMENT}.yaml"',
        'npx --no-install cdk deploy --no-notices --app cdk.out --require-approval never "${ENVIRONMENT}/*"',
    ],
)
def test_unmanaged_command_check_can_fail(old: str) -> None:
    """The commands the workflows ran before (in a fresh shell, outside the project's environment)."""
    assert unmanaged_commands(old) != []
    assert unmanaged_commands('make diff ENV="$ENVIRONMENT" 2>&1 | tail -c 60000') == []


def test_pull_requests_run_make_test_and_diff_each_environment_into_the_summary() -> None:
    wf = _load("pull-request.yml")
    assert "pull_request" in wf["on"]
    assert _runs(wf["jobs"]["test"])[:2] == ["make test", "make synth"]
    diff = wf["jobs"]["diff"]
    assert diff["needs"] == "test"
    assert sorted(diff["strategy"]["matrix"]["environment"]) == sorted(SHIPPED_NAMES)
    runs = "\n".join(_runs(diff))
    assert 'make diff ENV="$ENVIRONMENT"' in runs
    assert runs.count('>> "$GITHUB_STEP_SUMMARY"') >= 2
    assert 'make guard-deployed ENV="$ENVIRONMENT"' in runs
    roles = [s["with"] for s in _steps(diff) if "configure-aws-credentials" in s.get("uses", "")]
    assert roles[0]["role-to-assume"].endswith(":role/fminfra-github-diff")
    assert "cdk-hnb659fds-lookup-role" in roles[1]["role-to-assume"]
    assert roles[1]["role-skip-session-tagging"] is True


def test_main_promotes_one_artifact_dev_then_staging_then_prod() -> None:
    wf = _load("deploy.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    jobs = wf["jobs"]
    assert _runs(jobs["synth"])[:2] == ["make test", "make synth"]
    assert [jobs[e]["needs"] for e in ("dev", "staging", "prod")] == ["synth", "dev", "staging"]
    assert runner_label_problems(wf, ROOT / "pipeline.yaml") == []
    for env in ("dev", "staging", "prod"):
        assert jobs[env]["uses"] == "./.github/workflows/deploy-environment.yml"
        assert {k: v for k, v in jobs[env]["with"].items() if k != "accept_runs_on"} == {"environment": env}
        assert jobs[env]["permissions"] == {"contents": "read", "id-token": "write", "actions": "read"}
    # one workflow-wide group would hold dev and staging while prod waits for approval
    assert "concurrency" not in wf


def runner_label_problems(deploy: dict[str, Any], pipeline_file: Path) -> list[str]:
    """deploy.yml passes each environment's pipeline.yaml accept.runs_on as accept_runs_on (a JSON
    list), and nothing where pipeline.yaml names none; load_pipeline requires runs_on where the
    cluster's EKS endpoint is private (docs/facts/eks.md#eks-private-endpoint-reach)."""
    from fminfra.config.pipeline import load_pipeline

    pipeline, configs = load_pipeline(pipeline_file)
    problems = []
    for env, cfg in zip(pipeline.environments, configs, strict=True):
        passed = (deploy["jobs"].get(cfg.name, {}).get("with") or {}).get("accept_runs_on")
        labels = json.loads(passed) if passed else None
        if labels != env.accept.runs_on:
            problems.append(
                f"{cfg.name}: deploy.yml passes accept_runs_on {passed!r}, pipeline.yaml accept.runs_on is {env.accept.runs_on}"
            )
    return problems


def test_runner_label_check_can_fail() -> None:
    wf = _load("deploy.yml")
    wf["jobs"]["staging"]["with"].pop("accept_runs_on")
    assert runner_label_problems(wf, ROOT / "pipeline.yaml") == [
        "staging: deploy.yml passes accept_runs_on None, pipeline.yaml accept.runs_on is ['self-hosted', 'fminfra-staging']"
    ]
    wf["jobs"]["dev"]["with"]["accept_runs_on"] = '["ubuntu-24.04"]'
    assert "dev: deploy.yml passes accept_runs_on '[\"ubuntu-24.04\"]', pipeline.yaml accept.runs_on is None" in runner_label_problems(
        wf, ROOT / "pipeline.yaml"
    )


def _creds(steps: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [(i, s.get("with") or {}) for i, s in enumerate(steps) if "configure-aws-credentials" in s.get("uses", "")]


def deploy_job_problems(job: dict[str, Any]) -> list[str]:
    """What a job that runs `make deploy` lacks: environment, per-environment concurrency, the
    session the deploy role allows, and the protection check before any AWS credentials."""

    problems = []
    steps = _steps(job)
    runs = [s.get("run", "") for s in steps]
    if not any("make deploy " in r for r in runs):
        return problems
    env = job.get("environment")
    name = env.get("name") if isinstance(env, dict) else env
    if not name:
        problems.append("names no GitHub environment")
    group = str(
        (job.get("concurrency") or {}).get("group", "") if isinstance(job.get("concurrency"), dict) else job.get("concurrency") or ""
    )
    if not name or str(name) not in group:
        problems.append(f"concurrency group {group!r} is not per environment ({name})")
    if isinstance(job.get("concurrency"), dict) and job["concurrency"].get("cancel-in-progress"):
        problems.append("cancel-in-progress would cut a deploy short")
    deploy_at = next(i for i, r in enumerate(runs) if "make deploy " in r)
    deploy_creds = [w for i, w in _creds(steps) if "github-deploy" in w.get("role-to-assume", "") and i < deploy_at]
    if not deploy_creds or any(str(w.get("role-duration-seconds")) != str(DEPLOY_SESSION_SECONDS) for w in deploy_creds):
        problems.append(f"deploy-role sessions must ask for role-duration-seconds {DEPLOY_SESSION_SECONDS}")
    if int(job.get("timeout-minutes", 360)) * 60 > DEPLOY_SESSION_SECONDS:
        problems.append("the job may outlive its session")
    check = next((i for i, r in enumerate(runs) if r.startswith("make github-environment-check ")), None)
    first_run = next((i for i, r in enumerate(runs) if r), None)
    first_creds = min((i for i, _ in _creds(steps)), default=len(steps))
    if check is None or check != first_run or check > first_creds:
        problems.append("the environment-protection check must be the first command, before any AWS credentials")
    return problems


def _deploying_jobs() -> list[tuple[str, dict[str, Any]]]:
    jobs = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, job in _load(path.name)["jobs"].items():
            if any("make deploy " in r for r in _runs(job)):
                jobs.append((f"{path.name}:{job_id}", job))
    return jobs


def test_every_deploying_job_is_protected_per_environment_with_a_long_session() -> None:
    jobs = _deploying_jobs()
    assert [j for j, _ in jobs] == ["deploy-environment.yml:deploy"]
    for where, job in jobs:
        assert job["permissions"]["actions"] == "read", where  # the protection check reads the environment
        # as each of deploy.yml's calls runs it: the calling job holds the environment's group
        # (tests/app/test_promotion_order.py)
        for env, caller in _load("deploy.yml")["jobs"].items():
            if caller.get("uses") == "./.github/workflows/deploy-environment.yml":
                called = {**job, "environment": env, "concurrency": job.get("concurrency") or caller.get("concurrency")}
                assert deploy_job_problems(called) == [], (where, env)


@pytest.mark.parametrize(
    ("break_it", "problem"),
    [
        (lambda j: j.pop("environment"), "names no GitHub environment"),
        (lambda j: j.update(concurrency={"group": "deploy", "cancel-in-progress": False}), "is not per environment"),
        (lambda j: [s["with"].pop("role-duration-seconds", None) for s in j["steps"] if "with" in s], "role-duration-seconds"),
        (lambda j: j.update(steps=[s for s in j["steps"] if "github-environment-check" not in s.get("run", "")]), "protection check"),
        (
            lambda j: j["steps"].insert(
                2, j["steps"].pop(next(i for i, s in enumerate(j["steps"]) if "role-duration-seconds" in s.get("with", {})))
            ),
            "protection check",
        ),
        (lambda j: j.update({"timeout-minutes": 600}), "outlive its session"),
    ],
)
def test_deploy_job_check_can_fail(break_it: Any, problem: str) -> None:
    job = copy.deepcopy(_load("deploy-environment.yml")["jobs"]["deploy"])
    break_it(job)
    assert any(problem in p for p in deploy_job_problems(job)), deploy_job_problems(job)


def test_reviewers_see_the_checks_before_they_approve_the_deploy() -> None:
    wf = _load("deploy-environment.yml")
    assert wf["on"]["workflow_call"]["inputs"]["environment"]["required"] is True
    checks, deploy = wf["jobs"]["checks"], wf["jobs"]["deploy"]
    assert "environment" not in checks  # runs before any approval
    assert deploy["needs"] == "checks" and deploy["environment"] == "${{ inputs.environment }}"
    runs = "\n".join(_runs(checks))
    assert 'make preflight ENV="$ENVIRONMENT"' in runs and 'make guard-deployed ENV="$ENVIRONMENT"' in runs
    assert '>> "$GITHUB_STEP_SUMMARY"' in runs
    roles = [w["role-to-assume"] for _, w in _creds(_steps(checks))]
    assert roles[0].endswith(":role/fminfra-github-check") and "lookup-role" in roles[1]
    steps = _steps(deploy)
    runs_d = [s.get("run", "") for s in steps]
    guard = runs_d.index('make guard-deployed ENV="$ENVIRONMENT"')
    deploy_i = runs_d.index('make deploy ENV="$ENVIRONMENT"')
    assert guard < deploy_i
    download = next(i for i, s in enumerate(steps) if "download-artifact" in s.get("uses", ""))
    assert download < guard
    # after a failed deploy: fresh credentials, then what CloudFormation is still doing
    report = runs_d.index('make stack-status ENV="$ENVIRONMENT"')
    assert steps[report]["if"] == "failure() && steps.deploy.outcome == 'failure'"
    assert steps[deploy_i]["id"] == "deploy"
    # the acceptance gate: after the deploy, with the acceptance role, in the same job (no second approval)
    gate = runs_d.index('make accept-gate ENV="$ENVIRONMENT"')
    gate_creds = [w for i, w in _creds(steps) if deploy_i < i < gate]
    assert gate > deploy_i and gate_creds[-1]["role-to-assume"].endswith(":role/fminfra-${{ inputs.environment }}-accept")
    assert gate_creds[-1]["unset-current-credentials"] is True
    # ... unless the gate has a runner of its own (accept_runs_on): then the accept job runs it
    assert steps[gate]["if"] == "inputs.accept_runs_on == ''"
    assert all(w.get("role-skip-session-tagging") is True for _, w in _creds(steps) if w.get("role-chaining"))
    assert wf["on"]["workflow_call"]["inputs"]["accept_runs_on"] == {
        "description": wf["on"]["workflow_call"]["inputs"]["accept_runs_on"]["description"],
        "required": False,
        "type": "string",
        "default": "",
    }
    assert accept_job_problems(wf["jobs"]["accept"]) == []
    # the test of the test: an accept job without the serving gate
    no_serving = copy.deepcopy(wf["jobs"]["accept"])
    no_serving["steps"] = [s for s in no_serving["steps"] if s.get("run") != 'make serving-gate ENV="$ENVIRONMENT"']
    assert accept_job_problems(no_serving) == ["does not run make serving-gate after the acceptance gate with the acceptance role"]
    assert 'make serving-gate ENV="$ENVIRONMENT"' not in _runs(deploy)  # a hosted runner cannot reach an internal NLB


def accept_job_problems(job: dict[str, Any]) -> list[str]:
    """The gate on the runner pipeline.yaml names: after the deploy, only with accept_runs_on, on
    those labels; the environment's subject (the acceptance role trusts it alone); a kubectl within
    one minor of the 1.34 cluster (docs/facts/eks.md#kubectl-version-skew), downloaded and checked
    against its published SHA-256 (docs/facts/pipeline.md#kubectl-download-checksum) before the gate."""
    problems = []
    if job.get("needs") != "deploy" or job.get("if") != "inputs.accept_runs_on != ''":
        problems.append("must follow the deploy job and run only with accept_runs_on")
    if "fromJSON(inputs.accept_runs_on)" not in str(job.get("runs-on")):
        problems.append(f"runs-on {job.get('runs-on')!r} is not the labels of accept_runs_on")
    if job.get("environment") != "${{ inputs.environment }}":
        problems.append("names no GitHub environment: the acceptance role would not trust its token")
    if (job.get("permissions") or {}).get("id-token") != "write":
        problems.append("needs id-token: write for OIDC")
    steps = _steps(job)
    runs = [s.get("run", "") for s in steps]
    gate = next((i for i, r in enumerate(runs) if r == 'make accept-gate ENV="$ENVIRONMENT"'), None)
    if gate is None:
        return [*problems, "does not run make accept-gate"]
    problems += gate_kubectl_problems(steps, gate)
    creds = [w for i, w in _creds(steps) if i < gate]
    if not creds or not creds[-1].get("role-to-assume", "").endswith(":role/fminfra-${{ inputs.environment }}-accept"):
        problems.append("the gate does not run with the acceptance role")
    # the serving gate: only here (the models' load balancers are internal), after the acceptance gate, same role
    serving = next((i for i, r in enumerate(runs) if r == 'make serving-gate ENV="$ENVIRONMENT"'), None)
    if serving is None or serving < gate or [i for i, _ in _creds(steps) if gate < i < serving]:
        problems.append("does not run make serving-gate after the acceptance gate with the acceptance role")
    return problems


KUBECTL_ACTION = ROOT / ".github" / "actions" / "kubectl" / "action.yml"


def _kubectl_action_run() -> str:
    (step,) = yaml.safe_load(KUBECTL_ACTION.read_text())["runs"]["steps"]
    return str(step["run"])


def gate_kubectl_problems(steps: list[dict[str, Any]], gate: int, action_run: str | None = None, version: str | None = None) -> list[str]:
    """A job that runs the acceptance gate installs the pinned kubectl first: the workflow's KUBECTL_VERSION
    within one minor of the 1.34 cluster (docs/facts/eks.md#kubectl-version-skew), through the local
    action, which downloads it and checks it against its published SHA-256
    (docs/facts/pipeline.md#kubectl-download-checksum) onto PATH; a GitHub-hosted image's own kubectl is
    the newest stable one (docs/facts/pipeline.md#github-runner-kubectl-latest), which accept refuses."""
    problems = []
    if version is None:
        version = (_load("deploy-environment.yml").get("env") or {}).get("KUBECTL_VERSION", "")
    if not re.fullmatch(r"v1\.3[3-5]\.[0-9]+", version):
        problems.append(f"KUBECTL_VERSION {version!r} is outside 1.33-1.35")
    run = _kubectl_action_run() if action_run is None else action_run
    if "dl.k8s.io/release/${KUBECTL_VERSION}" not in run or "sha256sum --check" not in run or "GITHUB_PATH" not in run:
        problems.append("the kubectl action is no checked download onto PATH")
    found = [
        i
        for i, s in enumerate(steps[:gate])
        if s.get("uses") == "./.github/actions/kubectl"
        and s.get("with", {}).get("version") == "${{ env.KUBECTL_VERSION }}"
        and s.get("if") == steps[gate].get("if")
    ]
    if not found:
        problems.append("no checked kubectl download onto PATH before the gate")
    return problems


def _kubectl_step(tmp_path: Path, checksum: str | None, arch: str = "X64") -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    """The kubectl action's step in a fresh bash, with a fake curl that serves a binary and its
    `.sha256` the way dl.k8s.io publishes them (docs/facts/pipeline.md#kubectl-download-checksum):
    the checksum file holds the hex digest alone. `checksum`: its content (None: the right one)."""
    run = _kubectl_action_run()
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    payload = "#!/bin/sh\necho fake kubectl\n"
    digest = hashlib.sha256(payload.encode()).hexdigest() if checksum is None else checksum
    (fakebin / "curl").write_text(
        "#!/bin/bash\n"
        'echo "$*" >> "$CURL_LOG"\n'
        'out=""; url=""; while [ $# -gt 0 ]; do case "$1" in -o) out="$2"; shift 2 ;; -*) shift ;; *) url="$1"; shift ;; esac; done\n'
        f'case "$url" in *.sha256) printf %s "{digest}" > "$out" ;; *) printf %s "$PAYLOAD" > "$out" ;; esac\n'
    )
    (fakebin / "curl").chmod(0o755)
    log, github_path = tmp_path / "curl.log", tmp_path / "github_path"
    env = {
        "PATH": f"{fakebin}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CURL_LOG": str(log),
        "PAYLOAD": payload,
        "RUNNER_ARCH": arch,
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        "GITHUB_PATH": str(github_path),
        "KUBECTL_VERSION": _load("deploy-environment.yml")["env"]["KUBECTL_VERSION"],
    }
    (tmp_path / "runner-temp").mkdir()
    result = subprocess.run(
        ["/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return result, github_path, log.read_text().splitlines() if log.exists() else []


def test_the_kubectl_step_installs_the_pinned_release_checked(tmp_path: Path) -> None:
    result, github_path, calls = _kubectl_step(tmp_path, None)
    assert result.returncode == 0, result.stdout + result.stderr
    [folder] = github_path.read_text().splitlines()
    assert (Path(folder) / "kubectl").read_text() == "#!/bin/sh\necho fake kubectl\n"
    assert os.access(Path(folder) / "kubectl", os.X_OK)
    base = "https://dl.k8s.io/release/v1.34.5/bin/linux/amd64/kubectl"
    assert [c.split()[-1] for c in calls] == [base, f"{base}.sha256"]


@pytest.mark.parametrize(("checksum", "arch"), [("0" * 64, "X64"), (None, "ARM32")])
def test_the_kubectl_step_refuses_a_bad_download(tmp_path: Path, checksum: str | None, arch: str) -> None:
    """The test of the test: a checksum that does not match (or an architecture with no build) stops the job, nothing on PATH."""
    result, github_path, _ = _kubectl_step(tmp_path, checksum, arch)
    assert result.returncode != 0
    assert not github_path.exists()
    assert ("FAILED" if checksum else "no Linux build for runner architecture ARM32") in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("break_it", "problem"),
    [
        (lambda j: j.pop("environment"), "names no GitHub environment"),
        (lambda j: j.update({"runs-on": "ubuntu-24.04"}), "is not the labels of accept_runs_on"),
        (lambda j: j.update(steps=[s for s in j["steps"] if s.get("uses") != "./.github/actions/kubectl"]), "checked kubectl"),
        (lambda j: j.pop("if"), "only with accept_runs_on"),
    ],
)
def test_accept_job_check_can_fail(break_it: Any, problem: str) -> None:
    job = copy.deepcopy(_load("deploy-environment.yml")["jobs"]["accept"])
    break_it(job)
    assert any(problem in p for p in accept_job_problems(job)), accept_job_problems(job)


def test_every_job_that_runs_the_gate_installs_the_pinned_kubectl_first() -> None:
    """The deploy job runs the gate itself when accept_runs_on is empty (a public endpoint): there too the
    pinned kubectl, under the gate's own condition (promotion read, B1)."""
    gates = [
        (name, job, i)
        for path in sorted(WORKFLOWS.glob("*.yml"))
        for name, job in _load(path.name)["jobs"].items()
        for i, step in enumerate(_steps(job))
        if step.get("run") == 'make accept-gate ENV="$ENVIRONMENT"'
    ]
    assert {name for name, _, _ in gates} == {"deploy", "accept"}
    assert [(name, gate_kubectl_problems(_steps(job), i)) for name, job, i in gates] == [("deploy", []), ("accept", [])]
    # the test of the test: the deploy job as it was (no kubectl step), and an action that checks nothing
    deploy, i = next((job, i) for name, job, i in gates if name == "deploy")
    steps = [s for s in _steps(deploy) if s.get("uses") != "./.github/actions/kubectl"]
    gate = next(n for n, s in enumerate(steps) if s.get("run") == 'make accept-gate ENV="$ENVIRONMENT"')
    assert gate_kubectl_problems(steps, gate) == ["no checked kubectl download onto PATH before the gate"]
    unchecked = _kubectl_action_run().replace("sha256sum --check", "true")
    assert gate_kubectl_problems(_steps(deploy), i, unchecked) == ["the kubectl action is no checked download onto PATH"]
    assert gate_kubectl_problems(_steps(deploy), i, version="v1.36.0") == ["KUBECTL_VERSION 'v1.36.0' is outside 1.33-1.35"]


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
            # a deploy may take the whole job: the role allows what the workflow asks for
            assert role["Properties"]["MaxSessionDuration"] == DEPLOY_SESSION_SECONDS == 21600
            seen.append(env)
        diff = roles["fminfra-github-diff"]
        (statement,) = diff["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"] == f"repo:{REPO}:pull_request"
        check = roles["fminfra-github-check"]
        (statement,) = check["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Condition"]["StringEquals"]["token.actions.githubusercontent.com:sub"] == f"repo:{REPO}:ref:refs/heads/main"
        check_id = next(lid for lid, r in template["Resources"].items() if r is check)
        (policy,) = [p for p in policies if {"Ref": check_id} in p["Properties"]["Roles"]]
        (grant,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert grant["Action"] == "sts:AssumeRole"
        grants = [grant["Resource"]] if isinstance(grant["Resource"], str) else grant["Resource"]
        assert all(":role/cdk-hnb659fds-lookup-role-" in r for r in grants), grants
    assert sorted(seen) == sorted(SHIPPED_NAMES)


def accept_role_problems(role: dict[str, Any], policies: list[dict[str, Any]], role_id: str, cfg: Any) -> list[str]:
    """What the acceptance role of an environment must be: trusted by its GitHub environment and
    the pipeline's acceptance step only; on Slurm, find the node and start a session with the
    non-interactive document; on EKS, describe its cluster; nothing else."""
    problems = []
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    subjects = [
        s["Condition"]["StringEquals"].get("token.actions.githubusercontent.com:sub") for s in statements if "Federated" in s["Principal"]
    ]
    if subjects != [f"repo:{REPO}:environment:{cfg.name}"]:
        problems.append(f"GitHub subjects {subjects}")
    step = f"arn:aws:iam::{PIPELINE_ACCOUNT}:role/fminfra-{cfg.name}-accept-step"
    others = [s for s in statements if "Federated" not in s["Principal"]]
    if [s.get("Condition") for s in others] != [{"ArnEquals": {"aws:PrincipalArn": step}}]:
        problems.append(f"other principals {others}")
    statements = [
        s for p in policies if {"Ref": role_id} in p["Properties"]["Roles"] for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    grants = [s for s in statements if s["Effect"] == "Allow"]
    denials = [s for s in statements if s["Effect"] == "Deny"]
    actions = sorted(a for s in grants for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    clusters = f"arn:aws:sagemaker:{cfg.region}:{cfg.account}:cluster/*"
    if cfg.compute.orchestrator == "slurm":
        if actions != ["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes", "ssm:StartSession", "ssm:TerminateSession"]:
            problems.append(f"actions {actions}")
        find = next((s for s in grants if s["Action"] == ["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"]), {})
        if find.get("Resource") != clusters:
            problems.append(f"find resources {find.get('Resource')}")
        # StartSession on "*" (no resource form is documented for a sagemaker-cluster: target,
        # docs/facts/iam.md#iam-ssm-start-session-hyperpod-target), only with SSM's document check,
        # and never on this account's EC2 instances, ECS tasks or own session documents
        session = next((s for s in grants if s["Action"] == "ssm:StartSession"), {})
        if session.get("Resource") != "*" or session.get("Condition") != {"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}}:
            problems.append(f"session grant {session}")
        denied = [
            f"arn:aws:ec2:*:{cfg.account}:instance/*",
            f"arn:aws:ecs:*:{cfg.account}:task/*",
            f"arn:aws:ssm:*:{cfg.account}:document/*",
        ]
        if [(s["Action"], sorted(s["Resource"]), s.get("Condition")) for s in denials] != [("ssm:StartSession", sorted(denied), None)]:
            problems.append(f"session denials {denials}")
        # its own sessions: Session Manager's session-id tag against ${aws:userid}
        # (docs/facts/iam.md#ssm-terminate-own-sessions-assumed-role)
        end = next((s for s in grants if s["Action"] == "ssm:TerminateSession"), {})
        own = {"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": "${aws:userid}"}}
        if end.get("Resource") != f"arn:aws:ssm:{cfg.region}:{cfg.account}:session/*" or end.get("Condition") != own:
            problems.append(f"terminate resources {end.get('Resource')} {end.get('Condition')}")
    elif denials or (
        actions != ["eks:DescribeCluster"]
        or grants[0]["Resource"] != f"arn:aws:eks:{cfg.region}:{cfg.account}:cluster/fminfra-{cfg.name}-eks"
    ):
        problems.append(f"eks grants {grants}")
    return problems


def _accept_roles(outdir: Path, stacks: list[GithubOidcStack], synth: Synth) -> list[tuple[dict[str, Any], list[dict[str, Any]], str, Any]]:
    found = []
    for stack in stacks:
        template = _template(outdir, stack)
        policies = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
        for lid, r in template["Resources"].items():
            if r["Type"] == "AWS::IAM::Role" and r["Properties"]["RoleName"].endswith("-accept"):
                found.append((r, policies, lid, synth.configs[r["Properties"]["RoleName"].split("-")[1]]))
    return found


def test_acceptance_roles_reach_their_cluster_only(oidc: tuple[list[GithubOidcStack], Path], synth: Synth) -> None:
    stacks, outdir = oidc
    roles = _accept_roles(outdir, stacks, synth)
    assert sorted(cfg.name for *_, cfg in roles) == sorted(SHIPPED_NAMES)
    for role, policies, lid, cfg in roles:
        assert accept_role_problems(role, policies, lid, cfg) == [], cfg.name
        assert role["Properties"]["MaxSessionDuration"] == 3 * 3600


def test_acceptance_role_check_can_fail(oidc: tuple[list[GithubOidcStack], Path], synth: Synth) -> None:
    stacks, outdir = oidc
    role, policies, lid, cfg = next(r for r in _accept_roles(outdir, stacks, synth) if r[3].name == "dev")
    # the code as it was: StartSession on the cluster ARNs and the document, no denials, no TerminateSession
    old = copy.deepcopy(policies)
    for p in old:
        doc = p["Properties"]["PolicyDocument"]
        doc["Statement"] = [s for s in doc["Statement"] if s["Effect"] == "Allow" and s["Action"] != "ssm:TerminateSession"]
        for s in doc["Statement"]:
            if s["Action"] == "ssm:StartSession":
                s.pop("Condition")
                s["Resource"] = [
                    f"arn:aws:sagemaker:{cfg.region}:{cfg.account}:cluster/*",
                    f"arn:aws:ssm:{cfg.region}::document/AWS-StartNonInteractiveCommand",
                ]
    found = accept_role_problems(role, old, lid, cfg)
    assert any("session grant" in p for p in found) and any("session denials" in p for p in found), found
    unconditioned = copy.deepcopy(policies)
    for p in unconditioned:
        for s in p["Properties"]["PolicyDocument"]["Statement"]:
            if s["Action"] == "ssm:StartSession" and s["Effect"] == "Allow":
                s.pop("Condition")
    assert any("session grant" in p for p in accept_role_problems(role, unconditioned, lid, cfg))
    wide_end = copy.deepcopy(policies)
    for p in wide_end:
        for s in p["Properties"]["PolicyDocument"]["Statement"]:
            if s["Action"] == "ssm:TerminateSession":
                s["Resource"] = "*"
    assert any("terminate resources" in p for p in accept_role_problems(role, wide_end, lid, cfg))
    open_trust = copy.deepcopy(role)
    open_trust["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"][
        "token.actions.githubusercontent.com:sub"
    ] = f"repo:{REPO}:*"
    assert any("GitHub subjects" in p for p in accept_role_problems(open_trust, policies, lid, cfg))


def _trusted_step_roles(app: cdk.App) -> list[str]:
    """The pipeline principals the synthesized acceptance roles trust (aws:PrincipalArn)."""
    found = []
    for stack in app.synth().stacks:
        for r in stack.template["Resources"].values():
            if r["Type"] == "AWS::IAM::Role" and r["Properties"]["RoleName"].endswith("-accept"):
                for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                    found += [s["Condition"]["ArnEquals"]["aws:PrincipalArn"]] if "ArnEquals" in s.get("Condition", {}) else []
    return found


def _dev() -> Any:
    from fminfra.config import load_config

    return load_config(ROOT / "config" / "dev.yaml")


def _pipeline_file(tmp_path: Path, name: str) -> Path:
    """The shipped pipeline.yaml under another pipeline name, its configs still the shipped ones."""
    data = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    data["name"] = name
    for env in data["environments"]:
        env["config"] = str(ROOT / env["config"])
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "pipeline.yaml"


def test_acceptance_roles_trust_the_step_roles_of_the_named_pipeline(tmp_path: Path) -> None:
    """synth.py reads the pipeline's name (pipeline.yaml `name`) and the acceptance roles trust the
    step roles fminfra/app/pipeline.py names after it: not always `fminfra-ENV-accept-step`."""
    from fminfra.app.pipeline import accept_step_role_name
    from fminfra.app.synth import add_github_oidc_stacks

    context = {"github_repository": REPO, "pipeline_account": PIPELINE_ACCOUNT, "pipeline_file": str(_pipeline_file(tmp_path, "mlplat"))}
    app = cdk.App(outdir=str(tmp_path / "out"), context=context)
    add_github_oidc_stacks(app, [_dev()])
    assert _trusted_step_roles(app) == [f"arn:aws:iam::{PIPELINE_ACCOUNT}:role/{accept_step_role_name('mlplat', 'dev')}"]
    assert accept_step_role_name("mlplat", "dev") == "mlplat-dev-accept-step"
    # -c pipeline_name wins over the file
    app = cdk.App(outdir=str(tmp_path / "out2"), context={**context, "pipeline_name": "other"})
    add_github_oidc_stacks(app, [_dev()])
    assert _trusted_step_roles(app) == [f"arn:aws:iam::{PIPELINE_ACCOUNT}:role/other-dev-accept-step"]


def test_a_pipeline_file_of_another_account_is_one_line(tmp_path: Path) -> None:
    from fminfra.app.synth import add_github_oidc_stacks
    from fminfra.core.errors import ConfigError

    context = {"github_repository": REPO, "pipeline_account": "999999999999", "pipeline_file": str(_pipeline_file(tmp_path, "mlplat"))}
    with pytest.raises(ConfigError, match=r"account: the pipeline runs in 444444444444, but -c pipeline_account=999999999999"):
        add_github_oidc_stacks(cdk.App(outdir=str(tmp_path / "out"), context=context), [_dev()])
    context = {"github_repository": REPO, "pipeline_account": PIPELINE_ACCOUNT, "pipeline_file": str(tmp_path / "missing.yaml")}
    with pytest.raises(ConfigError, match=r"missing.yaml: \(file\): no such file"):
        add_github_oidc_stacks(cdk.App(outdir=str(tmp_path / "out2"), context=context), [_dev()])


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
        GithubOidcStack(cdk.App(), "x", account="111111111111", repository=repository, environments=[_dev()])


# --------------------------------------------------------------------------------------------
# the CI command lines, run as CI runs them

# What a failure to reach the project's environment looks like (not a failing check).
ENVIRONMENT_FAILURES = re.compile(
    r"No module named|ModuleNotFoundError|command not found|are you root|Permission denied|sudo: a password is required|npm ci|pip install"
)
# A runner that is root here stands in for GitHub's non-root runner: `id -u` says 1001, and sudo
# and apt-get fail as they do for a user without privileges; each call is logged.
_FAKE_NON_ROOT = {
    "id": '#!/bin/sh\nif [ "$1" = "-u" ]; then echo 1001; else exec /usr/bin/id "$@"; fi\n',
    "sudo": '#!/bin/sh\necho "sudo $*" >> "$FAKE_LOG"\necho "sudo: a password is required" >&2\nexit 1\n',
    "apt-get": '#!/bin/sh\necho "apt-get $*" >> "$FAKE_LOG"\necho "E: Could not open lock file - open (13: Permission denied) are you root?" >&2\nexit 100\n',
}


@dataclass
class CiSandbox:
    """A copy of the repository (.venv and node_modules linked, already installed), trimmed to the dev environment so that a synth takes seconds, and the fresh
    environment a CI step starts with."""

    root: Path
    env: dict[str, str]
    log: Path

    def run(self, command: str, **extra: str) -> subprocess.CompletedProcess[str]:
        # GitHub's `shell: bash` is `bash --noprofile --norc -eo pipefail {0}`; CodeBuild runs
        # each command in one shell too.
        return subprocess.run(
            ["/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command],
            cwd=self.root,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )


# Not copied into the sandbox: installs (.venv and node_modules linked instead; checkov's, 290 MB in
# a fresh clone, is for `make test` alone, which the sandbox never runs), build output and caches. No
# git: a CodePipeline source artifact is a zip without .git.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".venv-checkov",
    "node_modules",
    "cdk.out*",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    ".bench",
    "build",
    "dist",
    "*.egg-info",
)


def jsii_package_cache() -> Path:
    """The folder where this process's jsii runtime keeps the npm packages it extracts (aws-cdk-lib's
    above all): JSII_RUNTIME_PACKAGE_CACHE_ROOT, else ~/.cache/aws/jsii/package-cache on Linux
    (docs/facts/pipeline.md#jsii-runtime-package-cache)."""
    root = os.environ.get("JSII_RUNTIME_PACKAGE_CACHE_ROOT")
    return Path(root) if root else Path.home() / ".cache" / "aws" / "jsii" / "package-cache"


def ci_environment(dest: Path, root: Path) -> tuple[dict[str, str], Path]:
    """The fresh environment a CI step starts with, for a source folder `root` (scratch files in
    `dest`): PATH=/usr/bin:/bin (a stand-in non-root `id`, `sudo` and `apt-get` first when the
    tests run as root, their calls logged), CodeBuild's and GitHub's variables; and the log.

    HOME is a folder of its own, holding only jsii's package cache, the one this test session's jsii
    has filled: the steps of one CI job share HOME, and the job's first jsii load (its `make test`)
    extracts aws-cdk-lib there for the later steps, so that a step that loads jsii again extracts
    nothing (an extraction costs about 20 CPU-seconds: docs/testing.md)."""
    home = dest / "home"
    home.mkdir()
    cache = jsii_package_cache()
    if cache.is_dir():
        link = home / ".cache" / "aws" / "jsii" / "package-cache"
        link.parent.mkdir(parents=True)
        link.symlink_to(cache.resolve(), target_is_directory=True)
    log = dest / "privileged-calls.log"
    path = "/usr/bin:/bin"
    if os.geteuid() == 0:
        fakebin = dest / "fakebin"
        fakebin.mkdir()
        for name, text in _FAKE_NON_ROOT.items():
            (fakebin / name).write_text(text)
            (fakebin / name).chmod(0o755)
        path = f"{fakebin}:{path}"
    env = {
        "PATH": path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "FAKE_LOG": str(log),
        "CI": "true",
        # CodeBuild's container credentials, pointing nowhere that answers with credentials
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/fminfra-tests-dead-endpoint",
        "AWS_DEFAULT_REGION": "us-west-2",
        "CODEBUILD_BUILD_ID": "fminfra-tests:0",
        "CODEBUILD_SRC_DIR": str(root),
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(dest / "github_output"),
        "GITHUB_STEP_SUMMARY": str(dest / "step_summary"),
    }
    return env, log


def make_ci_sandbox(dest: Path, environments: tuple[str, ...] = ("dev",)) -> CiSandbox:
    root = dest / "repo"
    shutil.copytree(ROOT, root, ignore=_NOT_SOURCE, symlinks=True)
    for name in (".venv", "node_modules"):
        (root / name).symlink_to((ROOT / name).resolve())
    # Already installed: the install markers must stay newer than what they depend on.
    for name in ("requirements.txt", "requirements-dev.txt", "requirements-d2.txt", "package.json", "package-lock.json"):
        os.utime(root / name, (946684800, 946684800))
    for config in (root / "config").glob("*.yaml"):
        if config.stem not in environments:
            config.unlink()
    pipeline = yaml.safe_load((root / "pipeline.yaml").read_text())
    pipeline["environments"] = [e for e in pipeline["environments"] if Path(e["config"]).stem in environments]
    (root / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    env, log = ci_environment(dest, root)
    return CiSandbox(root=root, env=env, log=log)


@pytest.fixture(scope="module")
def ci(tmp_path_factory: pytest.TempPathFactory) -> CiSandbox:
    # The sandbox links the checkout's installed .venv and node_modules; without their markers
    # make would install into them (npm ci empties node_modules first), so only after set-up.
    for marker in (ROOT / ".venv" / ".installed", ROOT / "node_modules" / ".installed"):
        if not marker.is_file():
            pytest.skip(f"{marker.relative_to(ROOT)} missing: run `make setup` first")
    return make_ci_sandbox(tmp_path_factory.mktemp("ci"))


def test_a_sandbox_home_holds_the_sessions_jsii_cache_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandboxes' HOME starts with the jsii package cache this session filled (conftest imports
    aws_cdk before any test) and nothing else; without a cache (jsii's disabled), HOME is empty."""
    assert jsii_package_cache().is_dir(), "this session's jsii keeps no package cache"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    env, _ = ci_environment(tmp_path / "a", tmp_path)
    home = Path(env["HOME"])
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == [
        ".cache",
        ".cache/aws",
        ".cache/aws/jsii",
        ".cache/aws/jsii/package-cache",
    ]
    assert (home / ".cache/aws/jsii/package-cache").resolve() == jsii_package_cache().resolve()
    monkeypatch.setenv("JSII_RUNTIME_PACKAGE_CACHE_ROOT", str(tmp_path / "none"))
    env, _ = ci_environment(tmp_path / "b", tmp_path)
    assert list(Path(env["HOME"]).iterdir()) == []


def test_todays_synth_command_fails_in_a_fresh_shell(ci: CiSandbox) -> None:
    """The test of the tests below: the workflows' former synth line, in the same fresh shell,
    starts the system Python through cdk.json and cannot import aws_cdk."""
    result = ci.run("npx --no-install cdk synth --quiet --no-notices -o cdk.out.old '**'")
    assert result.returncode != 0
    assert ENVIRONMENT_FAILURES.search(result.stdout + result.stderr), result.stdout + result.stderr


def _workflow_runs() -> list[str]:
    runs: list[str] = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job in _load(path.name)["jobs"].values():
            runs += [r for r in _runs(job) if r not in runs]
    return runs


def test_every_workflow_command_runs_in_the_projects_environment(ci: CiSandbox) -> None:
    """Each `run:` of the workflows that calls a make command not run yet, in a fresh bash with
    PATH=/usr/bin:/bin, not root, CodeBuild's credential variables pointing at a dead endpoint.
    `make test` is the suite itself and the protection check needs GitHub's API (tested offline
    in test_github_environment.py)."""
    runs = [r for r in _workflow_runs() if r != "make test" and "github-environment-check" not in r]
    # the synth first: the later steps read its cdk.out
    runs.sort(key=lambda r: r != "make synth")
    assert runs[0] == "make synth"
    done: set[str] = set()
    selected = []
    for run in runs:
        commands = set(re.findall(r"make [\w-]+", run))
        if commands <= done:
            continue
        done |= commands
        selected.append(run)
    summary = Path(ci.env["GITHUB_STEP_SUMMARY"])

    def step(index: int) -> tuple[str, subprocess.CompletedProcess[str], str]:
        """One step in a fresh shell, with a step summary of its own (as GitHub gives each step)."""
        run = selected[index]
        own = summary.with_name(f"{summary.name}.{index}")
        own.write_text("")
        result = ci.run(run, ENVIRONMENT="dev", GITHUB_STEP_SUMMARY=str(own))
        return run, result, own.read_text()

    # The synth, then the steps that read its cdk.out side by side: each is a fresh shell that reads
    # the assembly and writes only its own files, and most wait on the dead credential endpoint.
    steps = [step(0)]
    with ThreadPoolExecutor(max_workers=len(selected) - 1) as pool:
        steps += pool.map(step, range(1, len(selected)))
    for run, result, step_summary in steps:
        output = result.stdout + result.stderr + step_summary
        assert not ENVIRONMENT_FAILURES.search(output), (run, output[-3000:])
        if run in ("make synth", "make deps") or run.startswith("make github-target"):
            assert result.returncode == 0, (run, output[-3000:])
        elif run.startswith("make docker-room"):  # dev builds no container image: nothing to do, offline
            assert result.returncode == 0 and "builds no container image" in output, (run, output[-3000:])
        elif run.startswith("make serving-gate"):  # dev serves no model: the gate is off, nothing runs
            assert result.returncode == 0 and "the serving gate is off" in output, (run, output[-3000:])
        elif run.startswith("make pr-summary"):  # offline: cost and picture from cdk.out
            assert result.returncode == 0, (run, output[-3000:])
            assert "#### Cost of dev (us-west-2)" in output and "```mermaid\nflowchart LR" in output, output[-3000:]
        else:  # these need AWS: with no credentials they fail, and say so
            assert result.returncode != 0, (run, output[-3000:])
            assert re.search(r"credential|Credential", output), (run, output[-3000:])
    assert done == {
        "make synth",
        "make deps",
        "make github-target",
        "make pr-summary",
        "make preflight",
        "make guard-deployed",
        "make diff",
        "make deploy",
        "make docker-room",
        "make stack-status",
        "make accept-gate",
        "make serving-gate",
    }
    assert (ci.root / "cdk.out" / "manifest.json").is_file()
    assert Path(ci.env["GITHUB_OUTPUT"]).read_text() == "account=111111111111\nregion=us-west-2\n"
    assert not ci.log.exists() or ci.log.read_text() == ""


# --------------------------------------------------------------------------------------------
# `make promtool`: root, a user with sudo (GitHub's hosted runners), a user without


def _promtool(
    tmp_path: Path, uid: int, *, sudo: bool = True, promtool: bool = False, makefile: Path = ROOT / "Makefile"
) -> tuple[int, str, list[str]]:
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    log = tmp_path / "calls.log"
    fakes = {
        "id": f'#!/bin/sh\nif [ "$1" = "-u" ]; then echo {uid}; else exec /usr/bin/id "$@"; fi\n',
        "apt-get": '#!/bin/sh\necho "uid=$(id -u) DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-} apt-get $*" >> "$LOG"\n[ "$(id -u)" = 0 ] || { echo "E: are you root?" >&2; exit 100; }\n',
    }
    if sudo:  # password-less: runs the command as root
        fakes["sudo"] = f'#!/bin/sh\necho "sudo $*" >> "$LOG"\n[ "$1" = -n ] && shift\nexport PATH="{fakebin}/root:$PATH"\nexec "$@"\n'
        (fakebin / "root").mkdir()
        (fakebin / "root" / "id").write_text('#!/bin/sh\nif [ "$1" = "-u" ]; then echo 0; else exec /usr/bin/id "$@"; fi\n')
        (fakebin / "root" / "id").chmod(0o755)
    if promtool:
        fakes["promtool"] = "#!/bin/sh\nexit 0\n"
    for name, text in fakes.items():
        (fakebin / name).write_text(text)
        (fakebin / name).chmod(0o755)
    (fakebin / "env").symlink_to("/usr/bin/env")
    result = subprocess.run(
        ["/usr/bin/make", "--no-print-directory", "-f", str(makefile), "promtool"],
        cwd=tmp_path,
        env={"PATH": str(fakebin), "LOG": str(log), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return result.returncode, result.stdout + result.stderr, calls


_APT = "apt-get -o DPkg::Lock::Timeout=120"


def test_promtool_installs_as_root(tmp_path: Path) -> None:
    code, output, calls = _promtool(tmp_path, 0, sudo=False)
    assert code == 0, output
    assert calls == [
        f"uid=0 DEBIAN_FRONTEND= {_APT} update -q",
        f"uid=0 DEBIAN_FRONTEND=noninteractive {_APT} install -y -q --no-install-recommends prometheus",
    ]


def test_promtool_installs_through_sudo_as_a_user(tmp_path: Path) -> None:
    code, output, calls = _promtool(tmp_path, 1001)
    assert code == 0, output
    assert calls == [
        f"sudo -n env {_APT} update -q",
        f"uid=0 DEBIAN_FRONTEND= {_APT} update -q",
        f"sudo -n env DEBIAN_FRONTEND=noninteractive {_APT} install -y -q --no-install-recommends prometheus",
        f"uid=0 DEBIAN_FRONTEND=noninteractive {_APT} install -y -q --no-install-recommends prometheus",
    ]


def test_promtool_without_root_or_sudo_says_what_to_install(tmp_path: Path) -> None:
    code, output, calls = _promtool(tmp_path, 1001, sudo=False)
    assert (code, calls) == (2, [])
    assert "make promtool: promtool is missing and installing it needs root: install Debian's prometheus package" in output


def test_promtool_already_there_installs_nothing(tmp_path: Path) -> None:
    assert _promtool(tmp_path, 1001, promtool=True)[::2] == (0, [])


def test_promtool_check_can_fail(tmp_path: Path) -> None:
    """The recipe before: apt-get straight away, which a user without root cannot run."""
    old = tmp_path / "Makefile.old"
    old.write_text(
        "SHELL := /bin/bash\npromtool:\n\tcommand -v promtool >/dev/null || { apt-get -o DPkg::Lock::Timeout=120 update -q && \\\n"
        "\t  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends prometheus; }\n"
    )
    work = tmp_path / "run"
    work.mkdir()
    code, _, calls = _promtool(work, 1001, makefile=old)
    assert code != 0 and calls == [f"uid=1001 DEBIAN_FRONTEND= {_APT} update -q"]


# --------------------------------------------------------------------------------------------
# tests/conftest.py: the machine's credentials never reach a test


def test_no_machine_credentials_reach_the_tests() -> None:
    import botocore.session

    from tests.conftest import AWS_CREDENTIAL_VARIABLES

    assert [v for v in AWS_CREDENTIAL_VARIABLES if v in os.environ] == []
    assert botocore.session.get_session().get_credentials() is None


def test_credential_check_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """With CodeBuild's variable back (a dead endpoint), botocore goes looking: the check above would fail."""
    import botocore.exceptions
    import botocore.session

    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/dead")
    monkeypatch.setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "1")
    with pytest.raises(botocore.exceptions.CredentialRetrievalError):
        botocore.session.get_session().get_credentials()
