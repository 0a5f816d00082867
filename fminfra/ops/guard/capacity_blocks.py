"""What a deploy does to Capacity Block groups inside their reservation window: a deploy that
updates a group inside its block's window (the guard's capacity check; docs/facts/capacity.md)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fminfra.core.assembly import Templates
from fminfra.ops.guard.replacements import _resources

SIZE_PROPERTIES = ("MinSize", "MaxSize", "DesiredCapacity")


def _keeps_size(resource: Mapping[str, Any]) -> bool:
    policy = (resource.get("UpdatePolicy") or {}).get("AutoScalingScheduledAction") or {}
    return policy.get("IgnoreUnmodifiedGroupSizeProperties") in (True, "true", "True")


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _block_windows(template: Mapping[str, Any]) -> dict[str, tuple[datetime, datetime, int]]:
    """Group logical id -> (scale-out, scale-in, running size) from its two one-time scheduled
    actions (what `GpuAutoScalingGroup` creates for a Capacity Block with a known window)."""
    actions: dict[str, list[tuple[datetime, int]]] = {}
    for res in _resources(template).values():
        props = res.get("Properties") or {}
        ref = props.get("AutoScalingGroupName")
        when = _parse_time(props.get("StartTime"))
        if res.get("Type") != "AWS::AutoScaling::ScheduledAction" or not isinstance(ref, dict) or "Ref" not in ref or when is None:
            continue
        actions.setdefault(ref["Ref"], []).append((when, int(props.get("DesiredCapacity", 0))))
    windows: dict[str, tuple[datetime, datetime, int]] = {}
    for lid, found in actions.items():
        outs = [a for a in found if a[1] > 0]
        ins = [a for a in found if a[1] == 0]
        if outs and ins:
            windows[lid] = (min(outs)[0], max(ins)[0], max(o[1] for o in outs))
    return windows


def capacity_block_deploy_findings(before: Templates, after: Templates, now: datetime) -> list[tuple[bool, str]]:
    """(blocking, line) for each Auto Scaling group that this deploy updates while its Capacity
    Block window runs (scale-out done, scale-in ahead). Blocking when the update would reset or resize it:
    without the AutoScalingScheduledAction update policy CloudFormation sets the size back to the
    template's values (docs/facts/capacity.md#cfn-scheduled-action-update-policy); with it, a
    changed size property still applies at once."""
    findings: list[tuple[bool, str]] = []
    for stack, template in sorted(after.items()):
        old_resources = _resources(before.get(stack) or {})
        for lid, (out_at, in_at, running) in sorted(_block_windows(template).items()):
            new = _resources(template).get(lid) or {}
            old = old_resources.get(lid)
            if not out_at <= now < in_at or old is None or old == new:
                continue
            head = f"{stack}: {lid} (AWS::AutoScaling::AutoScalingGroup) runs {running} instances in its Capacity Block until {in_at:%Y-%m-%dT%H:%M:%SZ}"
            old_p, new_p = old.get("Properties") or {}, new.get("Properties") or {}
            resized = [f"{p} {old_p.get(p)} -> {new_p.get(p)}" for p in SIZE_PROPERTIES if old_p.get(p) != new_p.get(p)]
            if not _keeps_size(new):
                size = "/".join(str(new_p.get(p)) for p in SIZE_PROPERTIES)
                findings.append(
                    (
                        True,
                        f"{head}: the deploy updates it without the AutoScalingScheduledAction update policy, "
                        f"so CloudFormation sets min/max/desired back to {size} and terminates its nodes",
                    )
                )
            elif resized:
                findings.append((True, f"{head}: the deploy changes {', '.join(resized)}, which Auto Scaling applies at once"))
            else:
                changed = sorted(k for k in set(old_p) | set(new_p) if old_p.get(k) != new_p.get(k)) or ["(attributes)"]
                findings.append(
                    (
                        False,
                        f"{head}: the deploy updates it ({', '.join(changed)}); the update policy keeps its size, "
                        "new instances only get the change",
                    )
                )
    return findings
