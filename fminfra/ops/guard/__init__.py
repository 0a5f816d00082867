"""Stateful-change guard: fail when a deploy would delete or replace a resource that holds data,
lose HyperPod, Auto Scaling or EKS node group nodes, or replace a custom-named resource.

What fails the guard and why is `replacements`' docstring (the engine: guarded types, create-only
properties, how a replacement spreads, instance groups, group sizes and subnets, custom names); `capacity_blocks` is the
Capacity Block window check, `sources` the synth and CloudFormation reads; templates are read by
`fminfra.core.assembly.read_templates`. This module is `command`, the verb. `--allow LOGICAL_ID`
lets a deliberate change through (it is still printed).
"""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fminfra.core.assembly import AssemblyError as GuardInputError
from fminfra.core.assembly import Templates, read_templates, write_baseline
from fminfra.ops.guard.capacity_blocks import capacity_block_deploy_findings
from fminfra.ops.guard.replacements import (
    DATA_TYPES,
    DEFAULT_REGION,
    EXTRA_CREATE_ONLY,
    GUARDED_TYPES,
    STATEFUL_TYPES,
    Finding,
    compare_templates,
    count_stateful,
    create_only_properties,
    custom_name_detail,
    custom_name_findings,
    instance_group_findings,
    name_property,
    report,
    scaling_findings,
    schema_create_only,
)
from fminfra.ops.guard.sources import (
    _cloudformation_client,
    change_set_findings,
    deployed_templates,
    over_inline_limit,
    synthesize,
    template_store,
)

__all__ = [
    "DATA_TYPES",
    "DEFAULT_REGION",
    "EXTRA_CREATE_ONLY",
    "GUARDED_TYPES",
    "STATEFUL_TYPES",
    "Finding",
    "GuardInputError",
    "Templates",
    "capacity_block_deploy_findings",
    "change_set_findings",
    "command",
    "compare_templates",
    "count_stateful",
    "create_only_properties",
    "custom_name_detail",
    "custom_name_findings",
    "deployed_templates",
    "instance_group_findings",
    "name_property",
    "read_templates",
    "report",
    "scaling_findings",
    "schema_create_only",
    "synthesize",
    "write_baseline",
]

# --------------------------------------------------------------------------------------------
# command line: `python -m fminfra guard ...`

BASELINE_ROOT = Path("baselines")


def command(ns: Any) -> int:
    """Handler of `guard`: exit 0 clean, 1 a stateful resource would be deleted/replaced, 2 bad input."""
    from fminfra.config import resolve_config_path

    try:
        if importlib.util.find_spec("cfnlint") is None:  # the create-only properties come from its schemas
            from fminfra.ops.gate import CFN_LINT_MISSING

            raise GuardInputError(f"guard: {CFN_LINT_MISSING}")
        if ns.deployed and ns.change_set:
            raise GuardInputError("guard: --deployed and --change-set exclude each other")
        if (ns.deployed or ns.change_set) and (ns.baseline or ns.update_baseline):
            raise GuardInputError("guard: --deployed/--change-set compare with AWS; do not combine with --baseline or --update-baseline")
        environment, region = None, DEFAULT_REGION
        if ns.config:
            config_path = resolve_config_path(ns.config)
            if ns.templates:
                from fminfra.config import load_config

                cfg = load_config(config_path)
                environment, region = cfg.name, cfg.region
                after = read_templates(Path(ns.templates), environment)
            else:
                if not (ns.deployed or ns.change_set or ns.update_baseline):
                    _require_baseline(Path(ns.baseline) if ns.baseline else None, config_path)  # before a slow synth
                environment, region, after = synthesize(config_path)
        elif ns.templates:
            after = read_templates(Path(ns.templates))
        else:
            raise GuardInputError("guard: give CONFIG, or --templates DIR (with --baseline DIR)")
        if ns.update_baseline:
            target = Path(ns.baseline) if ns.baseline else _default_baseline(environment)
            for path in write_baseline(after, target):
                print(f"wrote {path}")
            return 0
        if ns.deployed or ns.change_set:
            cloudformation = _cloudformation_client(region, ns.role_arn)
            if ns.change_set:
                store = template_store(region, ns.role_arn) if any(map(over_inline_limit, after.values())) else None
                findings = change_set_findings(cloudformation, after, allow=ns.allow, store=store)
                return report(findings, count_stateful(after))
            before = deployed_templates(cloudformation, after)
        else:
            baseline_dir = Path(ns.baseline) if ns.baseline else _default_baseline(environment)
            if not baseline_dir.is_dir():
                raise _no_baseline(baseline_dir)
            before = read_templates(baseline_dir, environment)
        status = report(compare_templates(before, after, allow=ns.allow, region=region), count_stateful(before))
        return max(status, _report_capacity_blocks(before, after))
    except GuardInputError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except RuntimeError as exc:
        if "ValidationFailed" in str(exc):  # cdk-nag findings while synthesizing CONFIG
            print(f"guard: policy checks failed while synthesizing (cdk-nag): {exc}", file=sys.stderr)
            return 1
        raise
    except Exception as exc:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, (BotoCoreError, ClientError)):
            from fminfra.ops.aws import access_problem

            print(f"guard: {access_problem(exc) or f'AWS: {exc}'}", file=sys.stderr)
            return 2
        raise


def _report_capacity_blocks(before: Templates, after: Templates) -> int:
    """Print what the deploy does to Capacity Block groups inside their window; 1 if it resets or resizes one."""
    findings = capacity_block_deploy_findings(before, after, datetime.now(UTC))
    for blocking, line in findings:
        print(f"{'FAIL' if blocking else 'WARN'} {line}")
    return 1 if any(blocking for blocking, _ in findings) else 0


def _require_baseline(baseline: Path | None, config_path: Path) -> None:
    """GuardInputError at once when the baseline to compare with does not exist."""
    from fminfra.config import load_config

    baseline_dir = baseline or _default_baseline(load_config(config_path).name)
    if not baseline_dir.is_dir():
        raise _no_baseline(baseline_dir)
    if not (baseline_dir / "manifest.json").exists() and not any(baseline_dir.glob("*.template.json")):
        raise GuardInputError(
            f"{baseline_dir}: (folder): no *.template.json files (an empty baseline); "
            "create it with `python -m fminfra guard CONFIG --update-baseline`"
        )


def _default_baseline(environment: str | None) -> Path:
    if environment is None:
        raise GuardInputError("guard: --baseline DIR is required without CONFIG")
    return BASELINE_ROOT / environment


def _no_baseline(baseline_dir: Path) -> GuardInputError:
    return GuardInputError(f"{baseline_dir}: (folder): no baseline; create it with `python -m fminfra guard CONFIG --update-baseline`")
