"""Two pushes to main, one environment: the acceptance gate tests the revision its run deployed.

GitHub keeps at most one running and one pending job (or workflow) per concurrency group; a newly
queued one cancels the pending one (docs/facts/pipeline.md#github-actions-concurrency-pending).
`Group` models that rule. `holders` reads from the workflow files which units of a run take the
environment's group (the calling job in deploy.yml, or jobs of deploy-environment.yml); `schedule`
plays run A and run B through the group in both orders GitHub allows (it guarantees none).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
CALLED = "./.github/workflows/deploy-environment.yml"


def _load(text: str) -> dict[str, Any]:
    return yaml.load(text, Loader=yaml.BaseLoader)  # BaseLoader: `on` stays a string key, values strings


def _group(job: dict[str, Any], env: str) -> str | None:
    conc = job.get("concurrency")
    group = conc.get("group") if isinstance(conc, dict) else conc
    return str(group).replace("${{ inputs.environment }}", env) if group else None


def holders(deploy: dict[str, Any], called: dict[str, Any], env: str) -> list[tuple[str, str]]:
    """(unit, group) of one run for one environment, in the order the run reaches them: the
    calling job when it names a group (it covers the whole called workflow), then every job of the
    called workflow that names one and runs for this environment (needs order)."""
    caller = deploy["jobs"][env]
    found: list[tuple[str, str]] = []
    group = _group(caller, env)
    if group:
        found.append((f"{env} (calling job: checks, deploy, accept)", group))
    runs_on = (caller.get("with") or {}).get("accept_runs_on", "")
    for job_id, job in called["jobs"].items():
        if job_id == "accept" and not runs_on:
            continue  # `if: inputs.accept_runs_on != ''`: the gate runs inside the deploy job then
        job_group = _group(job, env)
        if job_group:
            found.append((job_id, job_group))
    return found


@dataclass
class Group:
    """One concurrency group as GitHub runs it: one running, one pending; a newly queued unit
    cancels the pending one."""

    running: str | None = None
    pending: str | None = None
    log: list[str] = field(default_factory=list)

    def queue(self, unit: str) -> None:
        if self.running is None:
            self.running = unit
            self.log.append(f"start {unit}")
            return
        if self.pending is not None:
            self.log.append(f"cancel {self.pending}")
        self.pending = unit

    def finish(self) -> None:
        self.log.append(f"end {self.running}")
        self.running, waiting, self.pending = None, self.pending, None
        if waiting:
            self.queue(waiting)


def schedule(units: list[str], next_queued_first: bool) -> list[str]:
    """Run A's units, with run B's first unit queued while A's first one runs. When A's unit ends,
    A's next unit is queued either before (next_queued_first) or after GitHub hands the group to
    B's pending unit."""
    group = Group()
    a = [f"A:{u}" for u in units]
    group.queue(a[0])
    group.queue(f"B:{units[0]}")
    for nxt in a[1:]:
        if next_queued_first:
            group.queue(nxt)  # cancels B's pending unit
            group.finish()
        else:
            group.finish()  # B's unit starts
            group.queue(nxt)
            while group.running and group.running.startswith("B:"):
                group.finish()
    while group.running:
        group.finish()
    return group.log


def order_problems(deploy: dict[str, Any], called: dict[str, Any]) -> list[str]:
    problems = []
    for env, caller in deploy["jobs"].items():
        if caller.get("uses") != CALLED:
            continue
        found = holders(deploy, called, env)
        groups = [g for _, g in found]
        if not found:
            problems.append(f"{env}: no concurrency group: two runs deploy {env} at once")
            continue
        if _group(caller, env) and groups.count(groups[0]) > 1:
            problems.append(f"{env}: {groups[0]} is held by the calling job and again inside it: the inner job waits on itself")
            continue
        units = [u for u, _ in found]
        for first in (True, False):
            log = schedule(units, first)
            starts = [e.split(" ", 1)[1] for e in log if e.startswith("start ")]
            a_starts = [i for i, s in enumerate(starts) if s.startswith("A:")]
            if any(e.startswith("cancel ") for e in log):
                problems.append(f"{env}: {'; '.join(e for e in log if e.startswith('cancel '))} (GitHub cancels the pending one)")
            elif a_starts != list(range(a_starts[0], a_starts[0] + len(a_starts))):
                problems.append(f"{env}: B's {units[0]} runs between A's {' and '.join(units)}: A's gate would test B's revision")
    return problems


def _files() -> tuple[dict[str, Any], dict[str, Any]]:
    return _load((WORKFLOWS / "deploy.yml").read_text()), _load((WORKFLOWS / "deploy-environment.yml").read_text())


def test_a_later_run_never_gets_between_a_deploy_and_its_gate() -> None:
    deploy, called = _files()
    assert order_problems(deploy, called) == []
    for env in ("dev", "staging", "prod"):
        assert holders(deploy, called, env) == [(f"{env} (calling job: checks, deploy, accept)", f"fminfra-deploy-{env}")]
    assert deploy["jobs"]["prod"]["concurrency"]["cancel-in-progress"] == "false"


def test_the_order_check_can_fail() -> None:
    """A test of the test: the groups as they were (on the deploy and accept jobs), a group on
    both levels, and none at all."""
    deploy, called = _files()
    before_deploy, before_called = copy.deepcopy(deploy), copy.deepcopy(called)
    for env in ("dev", "staging", "prod"):
        before_deploy["jobs"][env].pop("concurrency")
    for job_id in ("deploy", "accept"):
        before_called["jobs"][job_id]["concurrency"] = {"group": "fminfra-deploy-${{ inputs.environment }}", "cancel-in-progress": "false"}
    problems = order_problems(before_deploy, before_called)
    assert [p.split(":")[0] for p in problems] == ["staging", "staging"], problems  # dev and prod gate inside the deploy job
    assert "cancel B:deploy" in problems[0] and "A's gate would test B's revision" in problems[1], problems
    both = copy.deepcopy(before_called)
    assert any("waits on itself" in p for p in order_problems(deploy, both))
    none = copy.deepcopy(before_deploy)
    assert any("no concurrency group" in p for p in order_problems(none, called))


def test_the_model_follows_githubs_rule() -> None:
    group = Group()
    for unit in ("one", "two", "three"):
        group.queue(unit)
    group.finish()
    group.finish()
    assert group.log == ["start one", "cancel two", "end one", "start three", "end three"]
