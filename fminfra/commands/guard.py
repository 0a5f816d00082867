"""Stateful-change guard: fail when a deploy would delete or replace a resource that holds data.

Compares the templates about to be deployed (AFTER) with a baseline (BEFORE): the committed
templates under `baselines/<env>/`, the templates CloudFormation holds for the deployed stacks,
or, in change-set mode, CloudFormation's own replacement verdicts. A stateful resource (see
`STATEFUL_TYPES`) fails the guard when

- its logical id is no longer in any AFTER template (CloudFormation deletes it, or orphans it
  when retained, and the next one starts empty), or its type changed;
- a property changed that the resource's CloudFormation schema marks create-only (cfn-lint ships
  the schemas: `createOnlyProperties`), or that `EXTRA_CREATE_ONLY` lists for what the schemas
  miss (FSx `DeploymentType`, `EfaEnabled`, ...): CloudFormation replaces the resource.

Each finding names the stack, the logical id, the type and the property. `--allow LOGICAL_ID`
lets a deliberate change through (it is still printed).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

# What each guarded type loses when CloudFormation deletes or replaces it (docs/promotion.md has
# the same table with the reasons). Types not listed here are recreated from the template with
# nothing lost, but their replacement still counts when it spreads to a guarded resource.
GUARDED_TYPES: dict[str, str] = {
    "AWS::S3::Bucket": "data: the objects",
    "AWS::KMS::Key": "data: everything encrypted under the key becomes unreadable",
    "AWS::FSx::FileSystem": "data: the file system's contents",
    "AWS::FSx::DataRepositoryAssociation": "data: files not yet exported to S3",
    "AWS::Logs::LogGroup": "data: the log events",
    "AWS::APS::Workspace": "data: the stored metrics",
    "AWS::APS::RuleGroupsNamespace": "alerting: the rules' pending and firing state, and alerts until it is recreated",
    "AWS::SageMaker::Cluster": "capacity and running work: the HyperPod nodes and the jobs on them",
    "AWS::EKS::Cluster": "capacity and running work: every workload and node of the cluster",
    "AWS::EC2::CapacityReservation": "capacity: the reserved instances; a new reservation may not be granted",
    "AWS::EC2::VPC": "identity: everything in the VPC must be recreated",
    "AWS::EC2::Subnet": "identity: everything in the subnet must be recreated",
}
# Kept for callers of the earlier API: the guarded types, in table order.
STATEFUL_TYPES: tuple[str, ...] = tuple(GUARDED_TYPES)

# Types whose DeletionPolicy/UpdateReplacePolicy decides whether their data survives a removal or
# a replacement: Retain (or Snapshot) turning into Delete (or no policy: CloudFormation's default
# is Delete for these types) fails the guard.
DATA_TYPES: tuple[str, ...] = (
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::FSx::FileSystem",
    "AWS::Logs::LogGroup",
    "AWS::APS::Workspace",
)
_KEEPING_POLICIES = ("Retain", "RetainExceptOnCreate", "Snapshot")

# Properties whose change replaces the resource but which the schemas do not mark create-only.
# Paths are JSON pointers into the resource as in the schemas; each entry carries its source.
EXTRA_CREATE_ONLY: dict[str, dict[str, str]] = {
    "AWS::FSx::FileSystem": {
        "/properties/LustreConfiguration/DeploymentType": "FSx: the deployment type is fixed at creation",
        "/properties/LustreConfiguration/EfaEnabled": "FSx: EFA cannot be changed after creation",
        "/properties/LustreConfiguration/DriveCacheType": "CloudFormation docs: Update requires Replacement",
        "/properties/LustreConfiguration/ImportPath": "CloudFormation docs: Update requires Replacement",
        "/properties/LustreConfiguration/ExportPath": "CloudFormation docs: Update requires Replacement",
        "/properties/LustreConfiguration/ImportedFileChunkSize": "CloudFormation docs: Update requires Replacement",
        "/properties/StorageType": "FSx: the storage type is fixed at creation",
    },
    "AWS::KMS::Key": {
        "/properties/KeySpec": "CloudFormation docs: changing KeySpec schedules the key for deletion and creates a new one",
        "/properties/KeyUsage": "CloudFormation docs: changing KeyUsage schedules the key for deletion and creates a new one",
        "/properties/MultiRegion": "CloudFormation docs: changing MultiRegion schedules the key for deletion and creates a new one",
        "/properties/Origin": "CloudFormation docs: changing Origin schedules the key for deletion and creates a new one",
    },
    "AWS::SageMaker::Cluster": {
        "/properties/Orchestrator": "HyperPod: a cluster cannot switch between Slurm and EKS orchestration",
    },
}

DEFAULT_REGION = "us-east-1"


@cache
def schema_create_only(resource_type: str, region: str = DEFAULT_REGION) -> tuple[str, ...]:
    """`createOnlyProperties` of a type from cfn-lint's bundled CloudFormation schemas."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type)
    except Exception:  # cfn-lint raises its own ResourceNotFoundError for unknown types/regions
        return ()
    return tuple(schema.schema.get("createOnlyProperties") or ())


def create_only_properties(resource_type: str, region: str = DEFAULT_REGION) -> dict[str, str]:
    """Create-only property pointers of a type -> where that fact comes from."""
    result = {p: "create-only in the CloudFormation schema" for p in schema_create_only(resource_type, region)}
    for pointer, source in EXTRA_CREATE_ONLY.get(resource_type, {}).items():
        result.setdefault(pointer, f"replacement ({source})")
    return result


_MISSING = object()


def _resolve(value: Any, parts: list[str], prefix: str) -> Iterator[tuple[str, Any]]:
    """Values at a JSON pointer (parts after /properties), expanding `*` over lists and maps."""
    if not parts:
        yield prefix, value
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = enumerate(value) if isinstance(value, list) else value.items() if isinstance(value, dict) else []
        for key, item in items:
            yield from _resolve(item, rest, f"{prefix}[{key}]")
        return
    child = value.get(head, _MISSING) if isinstance(value, dict) else _MISSING
    name = f"{prefix}.{head}" if prefix else head
    if child is _MISSING:
        yield name, _MISSING
        return
    yield from _resolve(child, rest, name)


def _values_at(properties: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    parts = pointer.split("/")[2:] if pointer.startswith("/properties/") else []
    return dict(_resolve(properties, parts, "")) if parts else {}


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(unset)"
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Finding:
    """One guarded resource that would be deleted, replaced, left unprotected or truncated."""

    stack: str
    logical_id: str
    resource_type: str
    action: str  # "deleted" | "replaced" | "unprotected" | "truncated"
    property: str  # the property path, or "(logical id)" / "(type)" / "(stack)" / "DeletionPolicy" ...
    detail: str
    allowed: bool = False

    def __str__(self) -> str:
        prefix = "ALLOWED " if self.allowed else ""
        return f"{prefix}{self.stack}: {self.logical_id} ({self.resource_type}) would be {self.action}: {self.property}: {self.detail}"


Templates = dict[str, dict[str, Any]]  # stack name -> template


def _resources(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(template.get("Resources") or {})


def _direct_replacement(old: Mapping[str, Any], new: Mapping[str, Any], region: str) -> list[tuple[str, str]]:
    """(property path, why) for each change of one resource that CloudFormation answers with a replacement."""
    rtype = old.get("Type", "")
    if new.get("Type") != rtype:
        return [("(type)", f"type changed from {rtype} to {new.get('Type')}")]
    old_props, new_props = old.get("Properties") or {}, new.get("Properties") or {}
    changes: list[tuple[str, str]] = []
    for pointer, source in sorted(create_only_properties(rtype, region).items()):
        old_values, new_values = _values_at(old_props, pointer), _values_at(new_props, pointer)
        for path in sorted(set(old_values) | set(new_values)):
            old_v, new_v = old_values.get(path, _MISSING), new_values.get(path, _MISSING)
            if old_v != new_v:
                changes.append((path, f"changed from {_show(old_v)} to {_show(new_v)} ({source})"))
    return changes


_SUB_NAME = re.compile(r"\$\{([^!}][^}]*)\}")


def _references(value: Any) -> Iterator[tuple[str, str]]:
    """("resource", LOGICAL_ID) and ("import", EXPORT_NAME) for every reference inside a value:
    Ref, Fn::GetAtt, names in Fn::Sub strings, and Fn::ImportValue of a literal export name."""
    stack: list[Any] = [value]
    while stack:  # iterative: a template can nest deeper than Python's recursion limit
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if len(item) == 1:
                ((key, arg),) = item.items()
                if key == "Ref" and isinstance(arg, str):
                    yield "resource", arg
                    continue
                if key == "Fn::GetAtt":
                    target = arg[0] if isinstance(arg, list) and arg else arg.split(".", 1)[0] if isinstance(arg, str) else None
                    if isinstance(target, str):
                        yield "resource", target
                    continue
                if key == "Fn::Sub":
                    text = arg[0] if isinstance(arg, list) and arg else arg
                    if isinstance(text, str):
                        for name in _SUB_NAME.findall(text):
                            yield "resource", name.split(".", 1)[0]
                    if isinstance(arg, list):
                        stack.extend(arg[1:])
                    continue
                if key == "Fn::ImportValue" and isinstance(arg, str):
                    yield "import", arg
                    continue
            stack.extend(item.values())


def _exports(after: Templates) -> dict[str, tuple[str, Any]]:
    """Export name -> (stack, exported value) of every AFTER template's Outputs."""
    exports: dict[str, tuple[str, Any]] = {}
    for stack, template in after.items():
        for output in (template.get("Outputs") or {}).values():
            name = ((output or {}).get("Export") or {}).get("Name") if isinstance(output, dict) else None
            if isinstance(name, str):
                exports[name] = (stack, output.get("Value"))
    return exports


def _referenced_resources(value: Any, stack: str, exports: Mapping[str, tuple[str, Any]]) -> Iterator[tuple[str, str]]:
    """(stack, logical id) of the resources a value depends on, following imports to the exporting stack."""
    for kind, name in _references(value):
        if kind == "resource":
            yield stack, name
        elif name in exports:
            source_stack, exported = exports[name]
            for inner_kind, inner in _references(exported):
                if inner_kind == "resource":
                    yield source_stack, inner


def _replacements(before: Templates, after: Templates, region: str) -> dict[tuple[str, str], tuple[str, str]]:
    """Every resource (any type) that AFTER replaces -> (property path, why): directly (a create-only
    property or the type changed) or because a create-only property references a replaced resource,
    in the same stack or through an export; followed until nothing more changes."""
    replaced: dict[tuple[str, str], tuple[str, str]] = {}
    pairs: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    for stack, template in before.items():
        after_resources = _resources(after.get(stack) or {})
        for lid, old in _resources(template).items():
            new = after_resources.get(lid)
            if not isinstance(new, dict) or not isinstance(old, dict):
                continue
            pairs.append((stack, lid, old, new))
            direct = _direct_replacement(old, new, region)
            if direct:
                replaced[(stack, lid)] = direct[0]
    exports = _exports(after)
    changed = True
    while changed:
        changed = False
        for stack, lid, _old, new in pairs:
            if (stack, lid) in replaced:
                continue
            props = new.get("Properties") or {}
            for pointer in sorted(create_only_properties(new.get("Type", ""), region)):
                for path, value in _values_at(props, pointer).items():
                    cause = next(
                        (ref for ref in _referenced_resources(value, stack, exports) if ref in replaced and ref != (stack, lid)), None
                    )
                    if cause is None:
                        continue
                    cause_type = (_resources(after.get(cause[0]) or {}).get(cause[1]) or {}).get("Type", "?")
                    where = "" if cause[0] == stack else f" in stack {cause[0]}"
                    why = f"{cause[1]} ({cause_type}){where}, which is replaced ({replaced[cause][0]}), and {path} is create-only"
                    replaced[(stack, lid)] = (path, why)
                    changed = True
                    break
                if (stack, lid) in replaced:
                    break
    return replaced


def _policy_findings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str]]:
    findings = []
    for policy in ("DeletionPolicy", "UpdateReplacePolicy"):
        was, now = old.get(policy, "Delete"), new.get(policy, "Delete")
        if was in _KEEPING_POLICIES and now not in _KEEPING_POLICIES:
            when = "a removal from the template" if policy == "DeletionPolicy" else "a replacement"
            findings.append((policy, f"changed from {was} to {now}: {when} would delete the data instead of keeping it"))
    return findings


def _retention_finding(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, str] | None:
    """RetentionInDays shortened (no value: kept forever): CloudWatch Logs deletes the older events."""
    was = (old.get("Properties") or {}).get("RetentionInDays")
    now = (new.get("Properties") or {}).get("RetentionInDays")
    if now is None or not isinstance(now, int) or (was is not None and (not isinstance(was, int) or now >= was)):
        return None
    return "RetentionInDays", f"shortened from {was if was is not None else 'never expire'} to {now} days: older log events are deleted"


def compare_templates(before: Templates, after: Templates, *, allow: Iterable[str] = (), region: str = DEFAULT_REGION) -> list[Finding]:
    """Findings for every guarded resource in BEFORE that AFTER deletes, replaces (directly or through
    a reference), leaves unprotected (Retain -> Delete) or truncates (log retention shortened)."""
    allowed = set(allow)
    after_index: dict[str, tuple[str, dict[str, Any]]] = {}
    for stack, template in after.items():
        for lid, res in _resources(template).items():
            after_index.setdefault(lid, (stack, res))
    replaced = _replacements(before, after, region)
    findings: list[Finding] = []
    for stack, template in sorted(before.items()):
        after_resources = _resources(after[stack]) if stack in after else None
        for lid, res in sorted(_resources(template).items()):
            rtype = res.get("Type", "")
            if rtype not in GUARDED_TYPES:
                continue

            def add(action: str, prop: str, detail: str, *, _stack: str = stack, _lid: str = lid, _rtype: str = rtype) -> None:
                findings.append(
                    Finding(_stack, _lid, _rtype, action, prop, f"{detail}; loses {GUARDED_TYPES[_rtype]}", allowed=_lid in allowed)
                )

            new = after_resources.get(lid) if after_resources is not None else None
            if new is None:
                moved = after_index.get(lid)
                if after_resources is None and stack not in after:
                    add("deleted", "(stack)", f"stack {stack} is no longer in the templates")
                elif moved is not None:
                    add("deleted", "(logical id)", f"moved to stack {moved[0]}: CloudFormation deletes it here and creates a new one there")
                else:
                    add("deleted", "(logical id)", f"logical id {lid} is no longer in stack {stack}")
                continue
            direct = _direct_replacement(res, new, region)
            for prop, detail in direct:
                add("replaced", prop, detail)
            if not direct and (stack, lid) in replaced:
                prop, detail = replaced[(stack, lid)]
                add("replaced", prop, f"references {detail}")
            if rtype in DATA_TYPES:
                for prop, detail in _policy_findings(res, new):
                    add("unprotected", prop, detail)
            if rtype == "AWS::Logs::LogGroup":
                retention = _retention_finding(res, new)
                if retention:
                    add("truncated", *retention)
    return findings


# --------------------------------------------------------------------------------------------
# Capacity Block groups: a deploy that updates a group inside its block's window (issue #22)

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


# --------------------------------------------------------------------------------------------
# reading templates


class GuardInputError(Exception):
    """Bad guard input: one line, exit 2."""


def read_templates(directory: Path, environment: str | None = None) -> Templates:
    """Templates by stack name from a folder of `<stack>.template.json` files or a cloud assembly.

    A cloud assembly (a folder with manifest.json, such as cdk.out or cdk.out/assembly-dev) is read
    through its manifests, so stack names come from there; `environment` picks one stage of it.
    """
    if not directory.is_dir():
        raise GuardInputError(f"{directory}: (folder): no such folder")
    if (directory / "manifest.json").exists():
        return _read_assembly_dir(directory, environment)
    templates: Templates = {}
    for path in sorted(directory.glob("*.template.json")):
        templates[path.name.removesuffix(".template.json")] = _read_template(path)
    if not templates:
        raise GuardInputError(f"{directory}: (folder): no *.template.json files")
    return templates


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GuardInputError(f"{path}: (file): no such file") from None
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise GuardInputError(f"{path}: (file): cannot read {what}: {type(exc).__name__}") from None
    except ValueError as exc:  # json.JSONDecodeError, and integers over Python's digit limit
        raise GuardInputError(f"{path}: (file): not {what}: {str(exc).splitlines()[0]}") from None


def _read_template(path: Path) -> dict[str, Any]:
    """One template, checked for the shape the guard reads: a mapping whose Resources and Outputs
    are mappings of mappings, each resource with a string Type."""
    template = _read_json(path, "a JSON template")
    if not isinstance(template, dict):
        raise GuardInputError(f"{path}: (template): must be a JSON object, got {type(template).__name__}")
    for section in ("Resources", "Outputs"):
        entries = template.get(section) or {}
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            raise GuardInputError(f"{path}: {section}: must map logical ids to objects")
    for lid, res in (template.get("Resources") or {}).items():
        if not isinstance(res.get("Type"), str) or not isinstance(res.get("Properties") or {}, dict):
            raise GuardInputError(f"{path}: Resources.{lid}: needs a string Type and an object of Properties")
    return template


def _read_assembly_dir(directory: Path, environment: str | None, depth: int = 0) -> Templates:
    manifest_path = directory / "manifest.json"
    manifest = _read_json(manifest_path, "a cloud assembly manifest")
    artifacts_map = manifest.get("artifacts") if isinstance(manifest, dict) else None
    if not isinstance(artifacts_map, dict) or not all(isinstance(a, dict) for a in artifacts_map.values()):
        raise GuardInputError(f"{manifest_path}: artifacts: must map artifact ids to objects (is this a cloud assembly?)")
    artifacts = list(artifacts_map.values())
    # With nested stage assemblies and an environment, only that stage's stacks (not, say, the
    # pipeline stack beside them); a stage's own assembly folder is read whole.
    nested = any(a.get("type") == "cdk:cloud-assembly" for a in artifacts)
    templates: Templates = {}
    for artifact_id, artifact in artifacts_map.items():
        props = artifact.get("properties") or {}
        kind = artifact.get("type")
        if kind not in ("aws:cloudformation:stack", "cdk:cloud-assembly"):
            continue
        key = "templateFile" if kind == "aws:cloudformation:stack" else "directoryName"
        target = props.get(key) if isinstance(props, dict) else None
        if not isinstance(target, str) or not target or Path(target).is_absolute() or ".." in Path(target).parts:
            raise GuardInputError(f"{manifest_path}: artifacts.{artifact_id}.properties.{key}: must be a relative path inside the assembly")
        if kind == "aws:cloudformation:stack" and not (nested and environment):
            path = directory / target
            name = props.get("stackName")
            templates[name if isinstance(name, str) and name else path.name.removesuffix(".template.json")] = _read_template(path)
        elif kind == "cdk:cloud-assembly":
            name = str(props.get("displayName", ""))
            if environment is None or name == environment or name.endswith(f"/{environment}"):
                if depth >= 8:
                    raise GuardInputError(f"{manifest_path}: artifacts.{artifact_id}: cloud assemblies nested more than 8 deep")
                templates.update(_read_assembly_dir(directory / target, None, depth + 1))
    if not templates:
        raise GuardInputError(f"{directory}: (assembly): no stacks{f' of environment {environment}' if environment else ''}")
    return templates


def write_baseline(templates: Templates, directory: Path) -> list[Path]:
    """Replace the baseline folder's templates with these (sorted keys, stable diffs)."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.template.json"):
        old.unlink()
    written = []
    for stack, template in sorted(templates.items()):
        path = directory / f"{stack}.template.json"
        path.write_text(json.dumps(template, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


def synthesize(config_path: Path) -> tuple[str, str, Templates]:
    """Synthesize one config in-process (no AWS calls): (environment, region, templates)."""
    import tempfile

    from fminfra.config import load_config

    cfg = load_config(config_path)  # before importing the CDK: bad input is one line, without jsii's start-up notices

    import aws_cdk as cdk

    from fminfra.synth import build_app

    context = _cdk_json_context()
    with tempfile.TemporaryDirectory(prefix="fminfra-guard-") as out:
        app = cdk.App(outdir=out, context=context)
        build_app([cfg], app=app)
        app.synth()
        return cfg.name, cfg.region, read_templates(Path(out), cfg.name)


def _cdk_json_context() -> dict[str, Any]:
    path = Path("cdk.json")
    if path.exists():
        return dict(json.loads(path.read_text()).get("context") or {})
    return {}


# --------------------------------------------------------------------------------------------
# with credentials: deployed templates and change sets


def deployed_templates(cloudformation: Any, stack_names: Iterable[str]) -> Templates:
    """The templates CloudFormation holds for these stacks (stacks not deployed yet are skipped)."""
    from botocore.exceptions import ClientError

    templates: Templates = {}
    for name in stack_names:
        try:
            body = cloudformation.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
        except ClientError as exc:
            if "does not exist" in str(exc):
                continue
            raise
        templates[name] = json.loads(body) if isinstance(body, str) else dict(body)
    return templates


def change_set_findings(
    cloudformation: Any,
    after: Templates,
    *,
    allow: Iterable[str] = (),
    change_set_name: str = "fminfra-guard",
    poll_seconds: float = 5.0,
    timeout_seconds: float = 600.0,
) -> list[Finding]:
    """Create a change set per deployed stack, read CloudFormation's verdicts, delete the change set.

    A stateful resource fails when CloudFormation says `Remove`, or `Modify` with `Replacement`
    True or Conditional. Stacks not deployed yet are skipped. The template goes as TemplateBody
    (CloudFormation's limit: 51,200 bytes); larger templates need an S3 URL and are reported.
    """
    from botocore.exceptions import ClientError

    allowed = set(allow)
    findings: list[Finding] = []
    for stack, template in sorted(after.items()):
        body = json.dumps(template)
        if len(body.encode()) > 51_200:
            raise GuardInputError(f"{stack}: (template): {len(body.encode())} bytes, over the 51,200 of a change set's TemplateBody")
        try:
            cloudformation.describe_stacks(StackName=stack)
        except ClientError as exc:
            if "does not exist" in str(exc):
                continue
            raise
        cloudformation.create_change_set(
            StackName=stack,
            ChangeSetName=change_set_name,
            ChangeSetType="UPDATE",
            TemplateBody=body,
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
        try:
            changes = _wait_for_changes(cloudformation, stack, change_set_name, poll_seconds, timeout_seconds)
        finally:
            cloudformation.delete_change_set(StackName=stack, ChangeSetName=change_set_name)
        for change in changes:
            rc = change.get("ResourceChange") or {}
            rtype, lid = rc.get("ResourceType", ""), rc.get("LogicalResourceId", "")
            if rtype not in STATEFUL_TYPES:
                continue
            if rc.get("Action") == "Remove":
                findings.append(Finding(stack, lid, rtype, "deleted", "(logical id)", "CloudFormation change set: Remove", lid in allowed))
            elif rc.get("Action") == "Modify" and rc.get("Replacement") in ("True", "Conditional"):
                props = sorted(
                    {
                        (d.get("Target") or {}).get("Name") or "?"
                        for d in rc.get("Details") or []
                        if (d.get("Target") or {}).get("RequiresRecreation") in ("Always", "Conditionally")
                    }
                )
                findings.append(
                    Finding(
                        stack,
                        lid,
                        rtype,
                        "replaced",
                        ", ".join(props) or "(unknown)",
                        f"CloudFormation change set: Replacement {rc['Replacement']}",
                        lid in allowed,
                    )
                )
    return findings


def _wait_for_changes(cloudformation: Any, stack: str, name: str, poll_seconds: float, timeout_seconds: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_seconds
    while True:
        described = cloudformation.describe_change_set(StackName=stack, ChangeSetName=name)
        status = described.get("Status")
        if status == "CREATE_COMPLETE":
            changes = list(described.get("Changes") or [])
            token = described.get("NextToken")
            while token:
                more = cloudformation.describe_change_set(StackName=stack, ChangeSetName=name, NextToken=token)
                changes.extend(more.get("Changes") or [])
                token = more.get("NextToken")
            return changes
        if status == "FAILED":
            reason = described.get("StatusReason") or ""
            if "didn't contain changes" in reason or "No updates" in reason:
                return []
            raise GuardInputError(f"{stack}: (change set): FAILED: {reason}")
        if time.monotonic() > deadline:
            raise GuardInputError(f"{stack}: (change set): still {status} after {timeout_seconds:.0f} s")
        time.sleep(poll_seconds)


def report(findings: list[Finding], compared: int, out: Any = None) -> int:
    """Print one line per finding; 1 when any is not allowed, else 0."""
    out = out or sys.stdout
    for finding in findings:
        print(str(finding), file=out)
    blocking = [f for f in findings if not f.allowed]
    if blocking:
        print(
            f"guard: FAIL: {len(blocking)} stateful resource change(s) would delete or replace data; "
            "allow a deliberate one with --allow LOGICAL_ID",
            file=out,
        )
        return 1
    allowed = len(findings)
    print(f"guard: ok: {compared} stateful resources compared{f', {allowed} allowed' if allowed else ''}", file=out)
    return 0


def count_stateful(templates: Templates) -> int:
    return sum(1 for t in templates.values() for r in _resources(t).values() if r.get("Type") in STATEFUL_TYPES)


# --------------------------------------------------------------------------------------------
# command line: `python -m fminfra guard ...`

BASELINE_ROOT = Path("baselines")


def add_arguments(p: Any) -> None:
    p.add_argument("config", nargs="?", metavar="CONFIG", help="file path, or environment name for config/NAME.yaml")
    p.add_argument("--baseline", metavar="DIR", help="templates before the change (default: baselines/<env>/)")
    p.add_argument("--templates", metavar="DIR", help="templates after the change (default: synthesize CONFIG)")
    p.add_argument("--allow", action="append", default=[], metavar="LOGICAL_ID", help="let this resource's change through")
    p.add_argument("--update-baseline", action="store_true", help="write the AFTER templates to the baseline folder")
    p.add_argument("--deployed", action="store_true", help="baseline = the deployed stacks' templates (needs credentials)")
    p.add_argument("--change-set", action="store_true", help="CloudFormation change sets decide (needs credentials)")
    p.add_argument("--role-arn", metavar="ARN", help="assume this role first (e.g. the target account's CDK deploy role)")


def main(ns: Any) -> int:
    """Handler of `guard`: exit 0 clean, 1 a stateful resource would be deleted/replaced, 2 bad input."""
    from fminfra.config import resolve_config_path

    try:
        if importlib.util.find_spec("cfnlint") is None:  # the create-only properties come from its schemas
            from fminfra.commands.gate import CFN_LINT_MISSING

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
                findings = change_set_findings(cloudformation, after, allow=ns.allow)
                return report(findings, count_stateful(after))
            before = deployed_templates(cloudformation, after)
        else:
            baseline_dir = Path(ns.baseline) if ns.baseline else _default_baseline(environment)
            if not baseline_dir.is_dir():
                raise GuardInputError(
                    f"{baseline_dir}: (folder): no baseline; create it with `python -m fminfra guard CONFIG --update-baseline`"
                )
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
            from fminfra.commands.aws import access_problem

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
        raise GuardInputError(f"{baseline_dir}: (folder): no baseline; create it with `python -m fminfra guard CONFIG --update-baseline`")
    if not (baseline_dir / "manifest.json").exists() and not any(baseline_dir.glob("*.template.json")):
        raise GuardInputError(
            f"{baseline_dir}: (folder): no *.template.json files (an empty baseline); "
            "create it with `python -m fminfra guard CONFIG --update-baseline`"
        )


def _default_baseline(environment: str | None) -> Path:
    if environment is None:
        raise GuardInputError("guard: --baseline DIR is required without CONFIG")
    return BASELINE_ROOT / environment


def _cloudformation_client(region: str, role_arn: str | None) -> Any:
    import boto3

    session = boto3.session.Session(region_name=region)
    if role_arn:
        creds = session.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="fminfra-guard")["Credentials"]
        session = boto3.session.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name=region,
        )
    return session.client("cloudformation")


HELP = "fail when a stateful resource (bucket, key, FSx, cluster, VPC, ...) would be deleted or replaced"
