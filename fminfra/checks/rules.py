"""The rules themselves. Later issues add theirs here, one function per rule."""

from __future__ import annotations

from typing import Any

from fminfra.checks import EXPORTS_KEY, Resource, Template, rule

EFA_GROUP_DESCRIPTION_PREFIX = "EFA:"


def refers_to(value: Any, logical_id: str) -> bool:
    """True when a property value is a Ref or GetAtt of the given logical id."""
    if isinstance(value, dict):
        if value.get("Ref") == logical_id:
            return True
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att and get_att[0] == logical_id:
            return True
    return False


def _self_rules(logical_id: str, resource: Resource, template: Template, direction: str) -> bool:
    """Whether the group has an all-traffic rule to/from itself (inline or standalone)."""
    inline_key, peer_key, standalone = (
        ("SecurityGroupIngress", "SourceSecurityGroupId", "AWS::EC2::SecurityGroupIngress")
        if direction == "ingress"
        else ("SecurityGroupEgress", "DestinationSecurityGroupId", "AWS::EC2::SecurityGroupEgress")
    )
    props = resource.get("Properties") or {}
    candidates = list(props.get(inline_key) or [])
    for other in (template.get("Resources") or {}).values():
        other_props = other.get("Properties") or {}
        if other.get("Type") == standalone and refers_to(other_props.get("GroupId"), logical_id):
            candidates.append(other_props)
    return any(str(c.get("IpProtocol")) == "-1" and refers_to(c.get(peer_key), logical_id) for c in candidates)


def is_efa_group(resource: Resource) -> bool:
    return str((resource.get("Properties") or {}).get("GroupDescription", "")).startswith(EFA_GROUP_DESCRIPTION_PREFIX)


@rule("FMI-EFA-SG-SELF", "AWS::EC2::SecurityGroup")
def efa_group_allows_all_traffic_to_and_from_itself(logical_id: str, resource: Resource, template: Template) -> str | None:
    """An EFA security group allows all traffic in from itself and out to itself."""
    if not is_efa_group(resource):
        return None
    missing = [d for d in ("ingress", "egress") if not _self_rules(logical_id, resource, template, d)]
    if missing:
        return f"EFA security group lacks an all-traffic {' and '.join(missing)} rule to itself (EFA traffic fails without it)"
    return None


@rule("FMI-SUBNET-AZ-ID", "AWS::EC2::Subnet")
def subnet_is_placed_by_az_id(logical_id: str, resource: Resource, template: Template) -> str | None:
    """Every subnet is placed by AZ ID (the same physical zone in every account), not AZ name."""
    props = resource.get("Properties") or {}
    if "AvailabilityZone" in props:
        return "subnet is placed by AvailabilityZone (a name, which differs between accounts); use AvailabilityZoneId"
    if not props.get("AvailabilityZoneId"):
        return "subnet has no AvailabilityZoneId"
    return None


def resolve(value: Any, template: Template) -> tuple[str, Resource, Template] | None:
    """The resource a Ref/GetAtt points to, following Fn::ImportValue into the exporting template
    (see `EXPORTS_KEY`): (logical id, resource, its template), or None when it cannot be traced."""
    if isinstance(value, dict) and "Fn::ImportValue" in value:
        exported = (template.get(EXPORTS_KEY) or {}).get(value["Fn::ImportValue"])
        if exported is None:
            return None
        owner, exported_value = exported
        return resolve(exported_value, owner)
    if isinstance(value, dict):
        logical_id = value.get("Ref")
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att:
            logical_id = get_att[0]
        if isinstance(logical_id, str):
            resource = (template.get("Resources") or {}).get(logical_id)
            if resource is not None:
                return logical_id, resource, template
    return None


def _tags(resource: Resource) -> dict[str, Any]:
    return {t.get("Key"): t.get("Value") for t in (resource.get("Properties") or {}).get("Tags") or []}


@rule("FMI-FSX-COMPUTE-SUBNET", "AWS::FSx::FileSystem")
def file_system_is_in_the_compute_subnet(logical_id: str, resource: Resource, template: Template) -> str | None:
    """A file system sits in the compute AZ's subnet, next to the GPUs (no cross-AZ traffic)."""
    subnets = (resource.get("Properties") or {}).get("SubnetIds") or []
    if len(subnets) != 1:
        return f"file system has {len(subnets)} subnets; it needs exactly the compute subnet"
    target = resolve(subnets[0], template)
    if target is None or target[1].get("Type") != "AWS::EC2::Subnet":
        return "file system subnet cannot be traced to a subnet of the environment's network; it must be the compute subnet"
    if _tags(target[1]).get("fminfra:subnet-kind") != "compute":
        return f"file system is in subnet {target[0]}, not the compute AZ's subnet (tag fminfra:subnet-kind=compute)"
    return None


@rule("FMI-FSX-EFA-SG-SELF", "AWS::FSx::FileSystem")
def efa_file_system_group_allows_all_traffic_to_and_from_itself(logical_id: str, resource: Resource, template: Template) -> str | None:
    """An EFA-enabled file system uses a security group allowing all traffic in from and out to itself."""
    props = resource.get("Properties") or {}
    if (props.get("LustreConfiguration") or {}).get("EfaEnabled") is not True:
        return None
    for group in props.get("SecurityGroupIds") or []:
        target = resolve(group, template)
        if target is None or target[1].get("Type") != "AWS::EC2::SecurityGroup":
            continue
        group_id, group_resource, owner = target
        if _self_rules(group_id, group_resource, owner, "ingress") and _self_rules(group_id, group_resource, owner, "egress"):
            return None
    return "EFA-enabled file system has no security group that allows all traffic in from and out to itself (FSx requires one)"
