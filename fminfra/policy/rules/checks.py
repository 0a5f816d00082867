"""The rules themselves, one function per rule; a new rule goes here with its test in tests/policy/test_checks.py."""

from __future__ import annotations

import re
from typing import Any

from fminfra.policy.rules.registry import EXPORTS_KEY, Resource, Template, rule

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


# --------------------------------------------------------------------------------------------
# HyperPod and IAM

_SERVICE_WILDCARD = re.compile(r"^[A-Za-z0-9-]+:\*$")


def resolve_reference(value: Any, template: Template) -> Resource | None:
    """The resource a Ref/GetAtt names, here or (through Fn::ImportValue) in the exporting stack."""
    target = resolve(value, template)
    return target[1] if target is not None else None


def _tag(resource: Resource, key: str) -> str | None:
    for tag in (resource.get("Properties") or {}).get("Tags") or []:
        if isinstance(tag, dict) and tag.get("Key") == key:
            return str(tag.get("Value"))
    return None


@rule("FMI-HYPERPOD-VPC", "AWS::SageMaker::Cluster")
def hyperpod_uses_compute_subnet_and_efa_group(logical_id: str, resource: Resource, template: Template) -> str | None:
    """A HyperPod cluster's VpcConfig uses the one compute subnet and includes the EFA security group."""
    vpc = (resource.get("Properties") or {}).get("VpcConfig") or {}
    subnets = [resolve_reference(s, template) for s in vpc.get("Subnets") or []]
    groups = [resolve_reference(g, template) for g in vpc.get("SecurityGroupIds") or []]
    problems = []
    if len(subnets) != 1 or subnets[0] is None or _tag(subnets[0], "fminfra:subnet-kind") != "compute":
        problems.append("VpcConfig.Subnets must be exactly the compute subnet (the AZ of the GPU capacity and FSx)")
    if not any(g is not None and is_efa_group(g) for g in groups):
        problems.append("VpcConfig.SecurityGroupIds must include the EFA security group (EFA traffic fails without it)")
    return "; ".join(problems) or None


@rule("FMI-HYPERPOD-LIFECYCLE-BUCKET", "AWS::SageMaker::Cluster")
def hyperpod_lifecycle_in_sagemaker_bucket(logical_id: str, resource: Resource, template: Template) -> str | None:
    """Every instance group's lifecycle scripts live in a bucket named sagemaker-* (all the managed policy covers)."""
    bad = []
    for group in (resource.get("Properties") or {}).get("InstanceGroups") or []:
        uri = (group.get("LifeCycleConfig") or {}).get("SourceS3Uri")
        if not (isinstance(uri, str) and uri.startswith("s3://sagemaker-")):
            bad.append(f"{group.get('InstanceGroupName')}: {uri!r}")
    if bad:
        return (
            "LifeCycleConfig.SourceS3Uri must be an s3://sagemaker-... prefix (AmazonSageMakerClusterInstanceRolePolicy covers only those buckets): "
            + ", ".join(bad)
        )
    return None


def _statements(resource: Resource) -> list[dict[str, Any]]:
    props = resource.get("Properties") or {}
    documents = [props.get("PolicyDocument")] + [p.get("PolicyDocument") for p in props.get("Policies") or [] if isinstance(p, dict)]
    out: list[dict[str, Any]] = []
    for document in documents:
        if isinstance(document, dict):
            statements = document.get("Statement") or []
            out.extend(s for s in (statements if isinstance(statements, list) else [statements]) if isinstance(s, dict))
    return out


@rule("FMI-IAM-NO-WILDCARD-ACTION", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role")
def iam_allows_no_wildcard_action(logical_id: str, resource: Resource, template: Template) -> str | None:
    """No IAM statement allows Action "*" or "service:*"."""
    bad: list[str] = []
    for statement in _statements(resource):
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action") or []
        for action in actions if isinstance(actions, list) else [actions]:
            if isinstance(action, str) and (action == "*" or _SERVICE_WILDCARD.match(action)):
                bad.append(action)
    if bad:
        return f"allows wildcard action(s) {', '.join(sorted(set(bad)))}; name the actions the principal needs"
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


# --------------------------------------------------------------------------------------------
# GPU capacity: launch templates


def _launch_template_data(resource: Resource) -> dict[str, Any]:
    return ((resource.get("Properties") or {}).get("LaunchTemplateData")) or {}


@rule("FMI-LT-EFA-ALL", "AWS::EC2::LaunchTemplate")
def launch_template_attaches_every_efa_interface(logical_id: str, resource: Resource, template: Template) -> str | None:
    """A launch template for an EFA instance type attaches every EFA interface of the type, in the
    catalog's layout (a node with fewer trains at a fraction of its bandwidth)."""
    from fminfra import catalog

    data = _launch_template_data(resource)
    instance_type = data.get("InstanceType")
    nics = data.get("NetworkInterfaces") or []
    has_efa = any(str(n.get("InterfaceType")) in ("efa", "efa-only") for n in nics)
    if not isinstance(instance_type, str):
        return "launch template with EFA interfaces names no literal InstanceType, so its layout cannot be checked" if has_efa else None
    spec = catalog.CATALOG.get(instance_type)
    if spec is None:
        return f"launch template with EFA interfaces for {instance_type}, which is not in fminfra.catalog" if has_efa else None
    if not spec.training:
        return None
    expected = [(i.network_card_index, i.device_index, i.interface_type) for i in catalog.efa_network_interfaces(spec.name)]
    given = [(n.get("NetworkCardIndex", 0), n.get("DeviceIndex"), n.get("InterfaceType", "interface")) for n in nics]
    if given != expected:
        efa = sum(1 for _, _, kind in given if kind in ("efa", "efa-only"))
        return (
            f"{instance_type} needs {spec.max_efa_interfaces} EFA interfaces (card 0 device 0 ENA, then efa-only per the catalog); "
            f"the template has {efa} in a different layout"
            if efa == spec.max_efa_interfaces
            else f"{instance_type} has {spec.max_efa_interfaces} EFA interfaces; the template attaches {efa}"
        )
    return None


@rule("FMI-LT-IMDSV2", "AWS::EC2::LaunchTemplate")
def launch_template_requires_imdsv2(logical_id: str, resource: Resource, template: Template) -> str | None:
    """Every launch template requires IMDSv2 (session tokens), so node credentials cannot leak
    through a request forgery to the metadata service."""
    options = _launch_template_data(resource).get("MetadataOptions") or {}
    if options.get("HttpTokens") != "required":
        return f"MetadataOptions.HttpTokens must be required (IMDSv2), got {options.get('HttpTokens', 'unset')!r}"
    return None


@rule("FMI-CB-NO-PLACEMENT", "AWS::EC2::LaunchTemplate")
def capacity_block_launch_has_no_placement_group(logical_id: str, resource: Resource, template: Template) -> str | None:
    """A Capacity Block launch names no placement group: the block brings its own placement, and
    a separately managed group makes launches fail (aws-parallelcluster #6311)."""
    data = _launch_template_data(resource)
    if (data.get("InstanceMarketOptions") or {}).get("MarketType") != "capacity-block":
        return None
    placement = data.get("Placement") or {}
    if placement.get("GroupName") or placement.get("GroupId"):
        return (
            "launch template for a Capacity Block (MarketType capacity-block) names a placement group; remove Placement.GroupName/GroupId"
        )
    return None
