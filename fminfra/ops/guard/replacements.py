"""The guard's engine: which resources a change deletes or replaces, directly or through the
references a replacement spreads along, and which of them hold data.

Compares the templates about to be deployed (AFTER) with a baseline (BEFORE): the committed
templates under `baselines/<env>/`, the templates CloudFormation holds for the deployed stacks,
or, in change-set mode, CloudFormation's own replacement verdicts. A stateful resource (see
`STATEFUL_TYPES`) fails the guard when

- its logical id is no longer in any AFTER template (CloudFormation deletes it, or orphans it
  when retained, and the next one starts empty), or its type changed;
- a property changed that the resource's CloudFormation schema marks create-only (cfn-lint ships
  the schemas: `createOnlyProperties`), or that `EXTRA_CREATE_ONLY` lists for what the schemas
  miss (FSx `DeploymentType`, `EfaEnabled`, ...): CloudFormation replaces the resource.

A HyperPod cluster (`AWS::SageMaker::Cluster`) also fails when an instance group loses nodes
in place: CloudFormation updates `InstanceGroups` without replacing the cluster, and SageMaker's
UpdateCluster deletes a group that is gone (removed or renamed), terminates nodes when its count
goes down, and, for the properties in `NODE_PROPERTIES`, replaces its nodes (see
`instance_group_findings`).

An ec2 Auto Scaling group (`AWS::AutoScaling::AutoScalingGroup`) or an EKS managed node group
(`AWS::EKS::Nodegroup`) also fails when it loses nodes in place: a lowered desired, maximum or
minimum size, or, for the Auto Scaling group, new subnets (`VPCZoneIdentifier`), which rebalance or
roll its instances (see `scaling_findings`). A raised size and the groups' scheduled actions pass.

A resource of any type whose custom name (`name_property`) stays the same while a create-only
change replaces it fails too: CloudFormation cannot replace a custom-named resource, so the deploy
fails and rolls back (see `custom_name_findings`).

An in-place update the service refuses fails too (the deploy fails and rolls back): a changed
`PerUnitStorageThroughput` on an EFA-enabled FSx for Lustre file system (see `refused_update_findings`).

Each finding names the stack, the logical id, the type and the property. `--allow LOGICAL_ID`
lets a deliberate change through (it is still printed).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from fminfra.capacity.rules import CUSTOM_RESERVATION_TYPE, RESERVATION_TYPES
from fminfra.core.assembly import Templates
from fminfra.storage.rules import lustre_automatic_metadata_iops

# What each guarded type loses when CloudFormation deletes or replaces it (docs/promotion.md has
# the same table with the reasons). Types not listed here are recreated from the template with
# nothing lost, but their replacement still counts when it spreads to a guarded resource.
# The reason for a property whose CloudFormation reference page says "Update requires: Replacement".
DOCS_REPLACEMENT = "CloudFormation docs: Update requires Replacement"
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
    **dict.fromkeys(RESERVATION_TYPES, "capacity: the reserved instances; a new reservation may not be granted"),
    # Deleting a group terminates its instances (DeleteAutoScalingGroup: docs/facts/capacity.md#asg-delete-terminates-instances):
    # an ec2 training group renamed or removed loses its nodes and the jobs on them.
    "AWS::AutoScaling::AutoScalingGroup": "capacity and running work: the group's instances and the jobs on them",
    # Deleting or replacing a managed node group (a removal, a new NodegroupName or another create-only
    # property: docs/facts/eks.md#eks-nodegroup-create-only-properties) terminates all its nodes.
    "AWS::EKS::Nodegroup": "capacity and running work: the node group's nodes and the pods on them",
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
        "/properties/LustreConfiguration/DriveCacheType": DOCS_REPLACEMENT,
        "/properties/LustreConfiguration/ImportPath": DOCS_REPLACEMENT,
        "/properties/LustreConfiguration/ExportPath": DOCS_REPLACEMENT,
        "/properties/LustreConfiguration/ImportedFileChunkSize": DOCS_REPLACEMENT,
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

# Custom resources that behave as a CloudFormation type: they replace on that type's create-only
# properties (the handler's REPLACING, checked against the schema by tests/capacity/test_reservation_handler.py).
SCHEMA_OF: dict[str, str] = {CUSTOM_RESERVATION_TYPE: "AWS::EC2::CapacityReservation"}

# HyperPod instance-group properties whose change deletes or replaces the group's nodes, with what
# the sources say (docs/facts/hyperpod.md#hyperpod-instance-group-update-deletes-nodes); the schema
# updates InstanceGroups in place (docs/facts/hyperpod.md#hyperpod-cluster-create-only-properties). A removed
# or renamed group and a lower InstanceCount are handled apart (always node-deleting). LifeCycleConfig
# is not here: UpdateCluster runs the lifecycle scripts only for new instance groups and leaves the
# nodes it has (docs/facts/hyperpod.md#hyperpod-update-cluster-lifecycle-scripts), so a script
# change (a new lifecycle prefix) replaces no node and passes.
NODE_PROPERTIES: dict[str, str] = {
    "InstanceType": "the group's nodes are of the old type; AWS says a group's type can be changed, not that its nodes survive (unverified: treated as replacing them)",
    "InstanceRequirements": "the group's instance types; as InstanceType (unverified: treated as replacing the nodes)",
    "InstanceStorageConfigs": "the nodes' extra volumes; no source says existing nodes keep theirs (unverified: treated as replacing them)",
    "ThreadsPerCore": "set when an instance is launched; no source says existing nodes are kept (unverified: treated as replacing them)",
    "TrainingPlanArn": "the capacity the nodes run on; no source says existing nodes are kept (unverified: treated as replacing them)",
    "SlurmConfig": "the group's Slurm node type (Controller, Login, Compute); no source says existing nodes are kept (unverified: treated as replacing them)",
}


@cache
def schema_create_only(resource_type: str, region: str = DEFAULT_REGION) -> tuple[str, ...]:
    """`createOnlyProperties` of a type from cfn-lint's bundled CloudFormation schemas."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, SCHEMA_OF.get(resource_type, resource_type))
    except Exception:  # cfn-lint raises its own ResourceNotFoundError for unknown types/regions
        return ()
    return tuple(schema.schema.get("createOnlyProperties") or ())


def create_only_properties(resource_type: str, region: str = DEFAULT_REGION) -> dict[str, str]:
    """Create-only property pointers of a type -> where that fact comes from."""
    result = {p: "create-only in the CloudFormation schema" for p in schema_create_only(resource_type, region)}
    for pointer, source in EXTRA_CREATE_ONLY.get(resource_type, {}).items():
        result.setdefault(pointer, f"replacement ({source})")
    return result


@cache
def name_property(resource_type: str, region: str = DEFAULT_REGION) -> str | None:
    """The property that gives a resource of this type its custom name, or None: the top-level
    create-only property of the type's schema called `Name`, or `<X>Name` where the type's own
    name ends with X (`NodegroupName` of AWS::EKS::Nodegroup, `GroupName` of
    AWS::EC2::SecurityGroup; not a Nodegroup's `ClusterName`, which names its parent)."""
    own = resource_type.rsplit("::", 1)[-1].lower()
    for pointer in schema_create_only(resource_type, region):
        parts = pointer.split("/")
        if len(parts) != 3 or parts[1] != "properties":
            continue
        prop = parts[2]
        if prop == "Name" or (prop.endswith("Name") and own.endswith(prop[: -len("Name")].lower())):
            return prop
    return None


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


def _changes(old_props: Mapping[str, Any], new_props: Mapping[str, Any], pointer: str) -> Iterator[tuple[str, Any, Any]]:
    """(path, old value, new value) for each path under `pointer` whose value differs (`_MISSING` where unset)."""
    old_values, new_values = _values_at(old_props, pointer), _values_at(new_props, pointer)
    for path in sorted(set(old_values) | set(new_values)):
        old_v, new_v = old_values.get(path, _MISSING), new_values.get(path, _MISSING)
        if old_v != new_v:
            yield path, old_v, new_v


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
    # "deleted" | "replaced" | "unprotected" | "truncated"; HyperPod, Auto Scaling and EKS node
    # groups: "shrunk" (a group removed or a size lowered) | "reprovisioned" (a group's nodes
    # replaced, or an Auto Scaling group's subnets changed); "unreplaceable" (a custom name),
    # "refused" (an in-place update the service refuses): both fail the deploy
    action: str
    property: str  # the property path, or "(logical id)" / "(type)" / "(stack)" / "DeletionPolicy" ...
    detail: str
    allowed: bool = False

    def __str__(self) -> str:
        prefix = "ALLOWED " if self.allowed else ""
        verb = "would fail the deploy" if self.action in ("unreplaceable", "refused") else f"would be {self.action}"
        return f"{prefix}{self.stack}: {self.logical_id} ({self.resource_type}) {verb}: {self.property}: {self.detail}"


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
        for path, old_v, new_v in _changes(old_props, new_props, pointer):
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


def refused_update_findings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(property path, detail) for each in-place change of one resource that its service refuses, so
    that CloudFormation's update fails and rolls back. FSx for Lustre file systems: a lower
    `StorageCapacity` (FSx only grows a Lustre file system, docs/facts/storage.md#fsx-lustre-update-only-grows),
    a lower metadata `Iops` or a switch to AUTOMATIC that would lower them (the same fact; what AUTOMATIC
    gives: docs/facts/storage.md#fsx-lustre-metadata-automatic-iops), and `PerUnitStorageThroughput` of a file system that is
    EFA-enabled before and after (enabling or disabling EFA replaces it instead): FSx cannot change
    the throughput tier of an EFA-enabled file system (docs/facts/storage.md#fsx-lustre-efa-requirements)."""
    if old.get("Type") != "AWS::FSx::FileSystem" or new.get("Type") != "AWS::FSx::FileSystem":
        return []
    findings: list[tuple[str, str]] = []
    was_props, now_props = old.get("Properties") or {}, new.get("Properties") or {}
    was_lustre = was_props.get("LustreConfiguration") or {}
    now_lustre = now_props.get("LustreConfiguration") or {}
    if not isinstance(was_lustre, dict) or not isinstance(now_lustre, dict):
        return []
    was_size, now_size = was_props.get("StorageCapacity"), now_props.get("StorageCapacity")
    if _lowered(was_size, now_size):
        findings.append(
            (
                "StorageCapacity",
                f"lowered from {was_size} to {now_size} GiB: FSx for Lustre only grows a file system's storage, "
                "so the update fails and rolls back; keep the capacity, or create a new file system and move the data",
            )
        )
    was_meta, now_meta = was_lustre.get("MetadataConfiguration") or {}, now_lustre.get("MetadataConfiguration") or {}
    if not isinstance(was_meta, dict) or not isinstance(now_meta, dict):
        was_meta = now_meta = {}
    if _lowered(was_meta.get("Iops"), now_meta.get("Iops")):
        findings.append(
            (
                "LustreConfiguration.MetadataConfiguration.Iops",
                f"lowered from {was_meta['Iops']} to {now_meta['Iops']}: FSx for Lustre does not lower a file system's "
                "metadata IOPS, so the update fails and rolls back; keep the IOPS, or create a new file system",
            )
        )
    was_iops, capacity = _size(was_meta.get("Iops")), _size(now_size)
    if was_iops is not None and capacity is not None and now_meta.get("Mode") == "AUTOMATIC" and was_meta.get("Mode") != "AUTOMATIC":
        automatic = lustre_automatic_metadata_iops(capacity)
        if was_iops > automatic:
            findings.append(
                (
                    "LustreConfiguration.MetadataConfiguration.Mode",
                    f"switched to AUTOMATIC with {was_iops} metadata IOPS provisioned, more than AUTOMATIC gives at {capacity} GiB "
                    f"({automatic}): FSx for Lustre rejects the switch (it does not lower metadata IOPS), so the update fails "
                    "and rolls back; keep USER_PROVISIONED",
                )
            )
    if was_lustre.get("EfaEnabled") is not True or now_lustre.get("EfaEnabled") is not True:
        return findings
    was, now = was_lustre.get("PerUnitStorageThroughput", _MISSING), now_lustre.get("PerUnitStorageThroughput", _MISSING)
    if was == now:
        return findings
    return [
        *findings,
        (
            "LustreConfiguration.PerUnitStorageThroughput",
            f"changed from {_show(was)} to {_show(now)} on an EFA-enabled file system: FSx cannot change the throughput tier "
            "of an EFA-enabled file system, so the update fails and rolls back; keep the tier (grow the storage capacity "
            "for more throughput), or create a new file system",
        ),
    ]


def _lowered(was: Any, now: Any) -> bool:
    """Both sizes (`_size`: an intrinsic cannot be compared here) and `now` below `was`."""
    before, after = _size(was), _size(now)
    return before is not None and after is not None and after < before


def _group_name(group: Any) -> str:
    name = group.get("InstanceGroupName") if isinstance(group, dict) else None
    return name if isinstance(name, str) else _show(name)


def _groups_by_name(resource: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    groups = (resource.get("Properties") or {}).get("InstanceGroups")
    return {_group_name(g): g for g in groups if isinstance(g, dict)} if isinstance(groups, list) else {}


def _nodes(group: Mapping[str, Any]) -> str:
    count, itype = group.get("InstanceCount"), group.get("InstanceType")
    nodes = f"{count} node{'' if count == 1 else 's'}" if isinstance(count, int) else f"{_show(count)} nodes"
    return f"{nodes}, {itype}" if isinstance(itype, str) else nodes


def instance_group_findings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(action, property path, detail) for each HyperPod instance group that the in-place update of
    one `AWS::SageMaker::Cluster` deletes, shrinks or reprovisions."""
    before, after = _groups_by_name(old), _groups_by_name(new)
    added = sorted(set(after) - set(before))
    findings: list[tuple[str, str, str]] = []
    for name, group in sorted(before.items()):
        where = f"InstanceGroups[{name}]"
        what = f"group {name} ({_nodes(group)})"
        now = after.get(name)
        if now is None:
            new_names = f"; new: {', '.join(added)}" if added else ""
            findings.append(
                (
                    "shrunk",
                    where,
                    f"{what} is no longer in InstanceGroups (removed or renamed{new_names}): "
                    "SageMaker deletes the group and all its nodes (UpdateCluster InstanceGroupsToDelete), root volumes included",
                )
            )
            continue
        was, count = group.get("InstanceCount"), now.get("InstanceCount")
        if isinstance(was, int) and isinstance(count, int) and count < was:
            findings.append(
                (
                    "shrunk",
                    f"{where}.InstanceCount",
                    f"{what}: changed from {was} to {count}: SageMaker terminates {was - count} of the group's {was} nodes, root volumes included",
                )
            )
        elif was != count and not (isinstance(was, int) and isinstance(count, int)):
            findings.append(
                ("shrunk", f"{where}.InstanceCount", f"{what}: changed from {_show(was)} to {_show(count)}: may terminate nodes")
            )
        for prop, why in NODE_PROPERTIES.items():
            old_v, new_v = group.get(prop, _MISSING), now.get(prop, _MISSING)
            if old_v == new_v:
                continue
            path = f"{where}.{prop}"
            if isinstance(old_v, dict) and isinstance(new_v, dict):  # name the one key that changed, e.g. SourceS3Uri
                keys = [k for k in sorted(set(old_v) | set(new_v)) if old_v.get(k, _MISSING) != new_v.get(k, _MISSING)]
                if len(keys) == 1:
                    path, old_v, new_v = f"{path}.{keys[0]}", old_v.get(keys[0], _MISSING), new_v.get(keys[0], _MISSING)
            findings.append(
                ("reprovisioned", path, f"{what}: changed from {_show(old_v)} to {_show(new_v)}: replaces the group's nodes ({why})")
            )
    return findings


# Size properties of a group of running nodes that CloudFormation updates in place, where each sits
# (a JSON pointer under /properties), and what lowering it does. A lower desired size terminates nodes
# at once; a lower maximum caps a larger group; a lower minimum lets a later scale-in go that far.
# Auto Scaling: docs/facts/capacity.md#asg-size-lowered-terminates-instances; EKS:
# docs/facts/eks.md#eks-nodegroup-scaling-config-lowered. A raised size terminates nothing and passes.
SIZE_PROPERTIES: dict[str, dict[str, str]] = {
    "AWS::AutoScaling::AutoScalingGroup": {
        "/properties/DesiredCapacity": "Auto Scaling terminates instances down to {now} (its termination policy picks which)",
        "/properties/MaxSize": "a group running more than {now} instances has its desired capacity set to {now}, "
        "and Auto Scaling terminates the rest",
        "/properties/MinSize": "the group may scale in to {now}: a scaling policy, a scheduled action or a later "
        "DesiredCapacity can terminate instances down to it",
    },
    "AWS::EKS::Nodegroup": {
        "/properties/ScalingConfig/DesiredSize": "EKS terminates nodes down to {now}",
        "/properties/ScalingConfig/MaxSize": "the node group may hold no more than {now} nodes (what EKS does with more "
        "running is not documented: treated as terminating them)",
        "/properties/ScalingConfig/MinSize": "the node group may scale in to {now}: the Cluster Autoscaler, a scheduled "
        "scale-down or a later DesiredSize can terminate nodes down to it",
    },
}
# Properties whose in-place change replaces a group's running instances, with why.
REPROVISIONING_PROPERTIES: dict[str, dict[str, str]] = {
    # docs/facts/capacity.md#asg-subnet-change-rebalances
    "AWS::AutoScaling::AutoScalingGroup": {
        "/properties/VPCZoneIdentifier": "new subnets can move the group to other Availability Zones: Auto Scaling rebalances "
        "the group, launching instances in the new subnets and terminating those in the old ones (a GPU group's capacity "
        "reservation is in one zone), and an AutoScalingRollingUpdate or AutoScalingReplacingUpdate policy replaces its "
        "instances or the whole group",
    },
}


def _size(value: Any) -> int | None:
    """A size as CloudFormation takes it: an integer, or a string of digits (CDK writes "4")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def scaling_findings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(action, property path, detail) for each in-place change of one Auto Scaling group or EKS
    managed node group that terminates running nodes: a size lowered ("shrunk"; a value the guard
    cannot compare, such as a reference, "may terminate"), or the group's subnets changed
    ("reprovisioned"). A node group size that leaves the template is not reported: EKS takes no
    action then (docs/facts/eks.md#cfn-nodegroup-scaling-config-update). Scheduled actions are
    separate resources and not looked at here."""
    rtype = old.get("Type", "")
    if new.get("Type") != rtype:
        return []
    node_group = rtype == "AWS::EKS::Nodegroup"
    old_props, new_props = old.get("Properties") or {}, new.get("Properties") or {}
    findings: list[tuple[str, str, str]] = []
    for pointer, effect in SIZE_PROPERTIES.get(rtype, {}).items():
        for path, was, now in _changes(old_props, new_props, pointer):
            if now is _MISSING and node_group:
                continue
            was_n, now_n = _size(was), _size(now)
            changed = f"changed from {_show(was)} to {_show(now)}"
            if was_n is None or now_n is None:
                findings.append(("shrunk", path, f"{changed}: may terminate {'nodes' if node_group else 'instances'}"))
            elif now_n < was_n:
                findings.append(("shrunk", path, f"{changed}: {effect.format(now=now_n)}"))
    for pointer, why in REPROVISIONING_PROPERTIES.get(rtype, {}).items():
        for path, was, now in _changes(old_props, new_props, pointer):
            findings.append(("reprovisioned", path, f"changed from {_show(was)} to {_show(now)}: {why}"))
    return findings


def custom_name_findings(
    before: Templates, after: Templates, replaced: Mapping[tuple[str, str], tuple[str, str]], region: str
) -> list[tuple[str, str, str, str, str]]:
    """(stack, logical id, type, property path, detail) for each resource, of any type, that AFTER
    replaces (directly or through a reference) while its custom name stays the same: CloudFormation
    refuses to replace a custom-named resource, so the update fails and rolls back
    (docs/facts/pipeline.md#cloudformation-custom-name-replacement)."""
    exports = _exports(after)
    found = []
    for (stack, lid), (path, why) in sorted(replaced.items()):
        if path == "(type)":
            continue
        old = _resources(before.get(stack) or {}).get(lid) or {}
        new = _resources(after.get(stack) or {}).get(lid) or {}
        rtype = new.get("Type", "")
        prop = name_property(rtype, region)
        if prop is None:
            continue
        was = (old.get("Properties") or {}).get(prop, _MISSING)
        now = (new.get("Properties") or {}).get(prop, _MISSING)
        if now is _MISSING or was != now:
            continue  # no custom name (CloudFormation generates one), or a new name: the replacement can be created first
        if any(ref in replaced for ref in _referenced_resources(now, stack, exports)):
            continue  # the name is built from a replaced resource's value, so it changes too
        direct = _direct_replacement(old, new, region)
        cause = f"{direct[0][1]} replaces it, and" if direct else f"references {why};"
        found.append((stack, lid, rtype, direct[0][0] if direct else path, custom_name_detail(cause, prop, now)))
    return found


def custom_name_detail(cause: str, prop: str, name: Any) -> str:
    """The finding's text for a replacement under a custom name that stays the same."""
    return (
        f"{cause} its {prop} {_show(name)} stays: CloudFormation cannot replace a custom-named resource, so the update "
        f"fails and rolls back; give it a new {prop}, or delete it (remove it and deploy) before adding it back"
    )


def compare_templates(before: Templates, after: Templates, *, allow: Iterable[str] = (), region: str = DEFAULT_REGION) -> list[Finding]:
    """Findings for every guarded resource in BEFORE that AFTER deletes, replaces (directly or through
    a reference), leaves unprotected (Retain -> Delete) or truncates (log retention shortened), every
    HyperPod instance group, Auto Scaling group and EKS node group it shrinks or reprovisions in
    place, every in-place update its service refuses,
    and every resource of any type it would replace under the same custom name."""
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
            if rtype == "AWS::SageMaker::Cluster" and (stack, lid) not in replaced:
                for action, prop, detail in instance_group_findings(res, new):
                    add(action, prop, detail)
            if rtype in SIZE_PROPERTIES and (stack, lid) not in replaced:
                for action, prop, detail in scaling_findings(res, new):
                    add(action, prop, detail)
            if not direct and (stack, lid) not in replaced:
                for prop, detail in refused_update_findings(res, new):
                    findings.append(Finding(stack, lid, rtype, "refused", prop, detail, allowed=lid in allowed))
            if rtype in DATA_TYPES:
                for prop, detail in _policy_findings(res, new):
                    add("unprotected", prop, detail)
            if rtype == "AWS::Logs::LogGroup":
                retention = _retention_finding(res, new)
                if retention:
                    add("truncated", *retention)
    for stack, lid, rtype, prop, detail in custom_name_findings(before, after, replaced, region):
        findings.append(Finding(stack, lid, rtype, "unreplaceable", prop, detail, allowed=lid in allowed))
    return findings


def report(findings: list[Finding], compared: int, out: Any = None) -> int:
    """Print one line per finding; 1 when any is not allowed, else 0."""
    out = out or sys.stdout
    for finding in findings:
        print(str(finding), file=out)
    blocking = [f for f in findings if not f.allowed]
    if blocking:
        print(
            f"guard: FAIL: {len(blocking)} stateful resource change(s) would delete or replace data or nodes, or fail the deploy; "
            "allow a deliberate one with --allow LOGICAL_ID",
            file=out,
        )
        return 1
    allowed = len(findings)
    print(f"guard: ok: {compared} stateful resources compared{f', {allowed} allowed' if allowed else ''}", file=out)
    return 0


def count_stateful(templates: Templates) -> int:
    return sum(1 for t in templates.values() for r in _resources(t).values() if r.get("Type") in STATEFUL_TYPES)
