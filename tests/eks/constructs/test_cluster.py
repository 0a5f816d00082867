"""EKS: the cluster of staging (HyperPod on EKS) and of the Slurm + inference test
config: auth mode, endpoint, secrets encryption, logging, pinned add-ons and charts, access
entries, inference node groups and their launch templates."""

from __future__ import annotations

import copy
import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

from fminfra.core.errors import ValidationError
from fminfra.core.versions import version
from fminfra.eks.constructs.cluster import EksCluster, EksClusterProps
from fminfra.eks.rules import NODE_NETWORKING_ADDONS
from tests.conftest import Synth

PINNED_ADDONS = {
    "vpc-cni": "EKS_ADDON_VPC_CNI_1_34_VERSION",
    "coredns": "EKS_ADDON_COREDNS_1_34_VERSION",
    "kube-proxy": "EKS_ADDON_KUBE_PROXY_1_34_VERSION",
    "eks-pod-identity-agent": "EKS_ADDON_POD_IDENTITY_AGENT_1_34_VERSION",
}
HYPERPOD_ADDONS = {
    "cert-manager": "EKS_ADDON_CERT_MANAGER_1_34_VERSION",
    "amazon-sagemaker-hyperpod-training-operator": "EKS_ADDON_HYPERPOD_TRAINING_OPERATOR_1_34_VERSION",
    # With the default compute.eks.scheduling (tests/hyperpod/constructs/test_task_governance.py).
    "amazon-sagemaker-hyperpod-taskgovernance": "EKS_ADDON_HYPERPOD_TASK_GOVERNANCE_1_34_VERSION",
}
# Added with storage.lustre (staging has one, hp-slurm-inf none): the static volume's CSI driver.
FSX_CSI_ADDONS = {"aws-fsx-csi-driver": "EKS_ADDON_FSX_CSI_DRIVER_1_34_VERSION"}


def _one(synth: Synth, env: str, resource_type: str) -> dict[str, Any]:
    found = synth.resources(env, "Compute", resource_type)
    assert len(found) == 1, list(found)
    return next(iter(found.values()))["Properties"]


@pytest.mark.parametrize("env", ["staging", "hp-slurm-inf"])
def test_cluster_auth_encryption_logging(synth: Synth, env: str) -> None:
    cluster = _one(synth, env, "AWS::EKS::Cluster")
    assert cluster["AccessConfig"]["AuthenticationMode"] in ("API", "API_AND_CONFIG_MAP")
    assert cluster["Version"] == "1.34"
    assert cluster["Name"] == f"fminfra-{env}-eks"
    (encryption,) = cluster["EncryptionConfig"]
    assert encryption["Resources"] == ["secrets"]
    key_id = encryption["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    key = synth.resources(env, "Compute", "AWS::KMS::Key")[key_id]
    assert key["Properties"]["EnableKeyRotation"] is True
    types = sorted(t["Type"] for t in cluster["Logging"]["ClusterLogging"]["EnabledTypes"])
    assert types == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    assert len(cluster["ResourcesVpcConfig"]["SubnetIds"]) >= 2


def test_staging_endpoint_is_private_only(synth: Synth) -> None:
    vpc = _one(synth, "staging", "AWS::EKS::Cluster")["ResourcesVpcConfig"]
    assert vpc["EndpointPrivateAccess"] is True
    assert vpc["EndpointPublicAccess"] is False
    assert "PublicAccessCidrs" not in vpc


def test_public_endpoint_only_for_given_cidrs(synth: Synth) -> None:
    vpc = _one(synth, "hp-slurm-inf", "AWS::EKS::Cluster")["ResourcesVpcConfig"]
    assert vpc["EndpointPrivateAccess"] is True
    assert vpc["EndpointPublicAccess"] is True
    assert vpc["PublicAccessCidrs"] == ["203.0.113.0/24"]


def _addons(synth: Synth, env: str) -> dict[str, str]:
    return {
        a["Properties"]["AddonName"]: a["Properties"]["AddonVersion"] for a in synth.resources(env, "Compute", "AWS::EKS::Addon").values()
    }


def test_staging_addons_pinned_from_manifest(synth: Synth) -> None:
    expected = {name: version(key) for name, key in {**PINNED_ADDONS, **HYPERPOD_ADDONS, **FSX_CSI_ADDONS}.items()}
    assert _addons(synth, "staging") == expected
    # HyperPod needs VPC CNI >= 1.18.3
    major, minor, patch = (int(x) for x in expected["vpc-cni"].lstrip("v").split("-")[0].split("."))
    assert (major, minor, patch) >= (1, 18, 3)


def test_inference_only_cluster_has_no_hyperpod_addons(synth: Synth) -> None:
    assert _addons(synth, "hp-slurm-inf") == {name: version(key) for name, key in PINNED_ADDONS.items()}


def _charts(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {c["Properties"]["Chart"]: c["Properties"] for c in synth.resources(env, "Compute", "Custom::AWSCDK-EKS-HelmChart").values()}


def test_charts_pinned_from_manifest(synth: Synth) -> None:
    charts = _charts(synth, "hp-slurm-inf")
    assert charts["nvidia-device-plugin"]["Version"] == version("CHART_NVIDIA_DEVICE_PLUGIN_VERSION")
    assert charts["nvidia-device-plugin"]["Repository"] == "https://nvidia.github.io/k8s-device-plugin"
    assert charts["aws-efa-k8s-device-plugin"]["Version"] == version("CHART_AWS_EFA_K8S_DEVICE_PLUGIN_VERSION")
    assert charts["aws-efa-k8s-device-plugin"]["Repository"] == "https://aws.github.io/eks-charts"


def test_admin_access_entries(synth: Synth) -> None:
    entries = [e["Properties"] for e in synth.resources("staging", "Compute", "AWS::EKS::AccessEntry").values()]
    admins = [e for e in entries if e["PrincipalArn"] == "arn:aws:iam::222222222222:role/PlatformAdmin"]
    assert len(admins) == 1
    assert admins[0]["AccessPolicies"][0]["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(admins[0]["AccessPolicies"][0]["PolicyArn"])


def test_hyperpod_attaches_to_the_eks_cluster(synth: Synth) -> None:
    cluster = _one(synth, "staging", "AWS::SageMaker::Cluster")
    eks_id = next(iter(synth.resources("staging", "Compute", "AWS::EKS::Cluster")))
    assert cluster["Orchestrator"] == {"Eks": {"ClusterArn": {"Fn::GetAtt": [eks_id, "Arn"]}}}
    assert {"Fn::GetAtt": [eks_id, "ClusterSecurityGroupId"]} in cluster["VpcConfig"]["SecurityGroupIds"]
    outputs = synth.template("staging", "Compute")["Outputs"]
    assert outputs["UpdateKubeconfigCommand"]["Value"] == "aws eks update-kubeconfig --region us-west-2 --name fminfra-staging-eks"


def _nodegroups(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {n["Properties"]["NodegroupName"]: n["Properties"] for n in synth.resources(env, "Compute", "AWS::EKS::Nodegroup").values()}


def test_staging_inference_group_matches_config(synth: Synth) -> None:
    group = _nodegroups(synth, "staging")["fminfra-staging-serve"]
    assert group["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert group["InstanceTypes"] == ["g6e.12xlarge"]
    assert group["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 1, "MaxSize": 4}
    assert group["Labels"] == {"fminfra/gpu-type": "g6e.12xlarge", "workload": "inference"}
    assert group["Taints"] == [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}]
    assert "LaunchTemplate" not in group and group["DiskSize"] == 200


def test_inference_groups_default_gpu_taint_and_efa_launch_template(synth: Synth) -> None:
    groups = _nodegroups(synth, "hp-slurm-inf")
    g6 = groups["fminfra-hp-slurm-inf-serve-g6"]
    assert g6["Taints"] == [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}]
    assert "LaunchTemplate" not in g6
    p5 = groups["fminfra-hp-slurm-inf-serve-p5"]
    assert "InstanceTypes" not in p5 and "DiskSize" not in p5
    template_id = p5["LaunchTemplate"]["Id"]["Ref"]
    data = synth.resources("hp-slurm-inf", "Compute", "AWS::EC2::LaunchTemplate")[template_id]["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == "p5.48xlarge"
    interfaces = data["NetworkInterfaces"]
    assert len(interfaces) == 33
    assert interfaces[0] == {**interfaces[0], "NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"}
    assert sum(1 for i in interfaces if i["InterfaceType"] == "efa-only") == 32
    eks_id = next(iter(synth.resources("hp-slurm-inf", "Compute", "AWS::EKS::Cluster")))
    assert all({"Fn::GetAtt": [eks_id, "ClusterSecurityGroupId"]} in i["Groups"] for i in interfaces)
    placement = synth.resources("hp-slurm-inf", "Compute", "AWS::EC2::PlacementGroup")
    (pg_id,) = placement
    assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [pg_id, "GroupName"]}}


def test_slurm_env_without_inference_has_no_eks(synth: Synth) -> None:
    assert synth.resources("dev", "Compute", "AWS::EKS::Cluster") == {}


def test_construct_rejects_unsupported_version_and_missing_addons_and_counts() -> None:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a", "b"], private_subnet_ids=["s-1", "s-2"])
    base = {"cluster_name": "c", "supported_versions": ["1.34"], "vpc": vpc, "subnets": vpc.private_subnets}
    with pytest.raises(ValidationError, match=r"^kubernetes_version must be one of 1.34, got '1.29'$"):
        EksCluster(stack, "A", EksClusterProps(kubernetes_version="1.29", addon_versions={}, **base))
    with pytest.raises(ValidationError, match=r"missing: coredns, kube-proxy, eks-pod-identity-agent$"):
        EksCluster(stack, "B", EksClusterProps(kubernetes_version="1.34", addon_versions={"vpc-cni": "v1"}, **base))
    addons = dict.fromkeys(PINNED_ADDONS, "v1")
    with pytest.raises(ValidationError, match=r"^system_node_count must be 0 or more, got -1$"):
        EksCluster(stack, "C", EksClusterProps(kubernetes_version="1.34", addon_versions=addons, system_node_count=-1, **base))
    with pytest.raises(ValidationError, match=r"^kubectl_layer is required when helm_charts or kubectl_manifests are given$"):
        EksCluster(stack, "D", EksClusterProps(kubernetes_version="1.34", addon_versions=addons, kubectl_manifests=True, **base))


def test_kubectl_manifests_get_a_kubectl_provider_without_charts() -> None:
    """A cluster without charts has no kubectl provider, and a manifest on it fails synth (the
    HyperPod EKS plan drain's RBAC did, tests/app/test_validate_synth.py); kubectl_manifests gives it one."""
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a", "b"], private_subnet_ids=["s-1", "s-2"])
    base = {"cluster_name": "c", "kubernetes_version": "1.34", "supported_versions": ["1.34"], "vpc": vpc, "subnets": vpc.private_subnets}
    addons = dict.fromkeys(PINNED_ADDONS, "v1")
    without = EksCluster(stack, "Without", EksClusterProps(addon_versions=addons, kubectl_layer=KubectlV34Layer(stack, "L1"), **base))
    assert without.cluster.kubectl_provider is None
    with_manifests = EksCluster(
        stack, "With", EksClusterProps(addon_versions=addons, kubectl_layer=KubectlV34Layer(stack, "L2"), kubectl_manifests=True, **base)
    )
    assert with_manifests.cluster.kubectl_provider is not None
    eks.KubernetesManifest(stack, "Manifest", cluster=with_manifests.cluster, manifest=[{"apiVersion": "v1", "kind": "Namespace"}])


def _node_role_sids(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    policies = synth.resources(env, "Compute", "AWS::IAM::Policy")
    attached = [p for p in policies.values() if {"Ref": "NodeRole52753DAC"} in p["Properties"]["Roles"]]
    assert attached
    return {s.get("Sid", ""): s for p in attached for s in p["Properties"]["PolicyDocument"]["Statement"]}


def test_hyperpod_eks_nodes_get_cni_and_pod_identity_permissions(synth: Synth) -> None:
    statements = _node_role_sids(synth, "staging")
    assert {"eks-auth:AssumeRoleForPodIdentity"} == set(_as_list(statements["EksPodIdentity"]["Action"]))
    assert statements["EksPodIdentity"]["Resource"] == "arn:aws:eks:us-west-2:222222222222:cluster/fminfra-staging-eks"
    assert statements["VpcConfigRead"]["Resource"] == "*"
    assert all(a.startswith(("ec2:Describe", "ecr:", "cloudwatch:Describe")) for a in statements["VpcConfigRead"]["Action"])
    # ENI changes: the VPC CNI's actions (AWS's AmazonEKS_CNI_Policy, from moto's copy), on this account's and region's
    # interfaces and instances and the cluster's own subnet, security groups and VPC
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    cni = json.loads(aws_managed_policies_data)["AmazonEKS_CNI_Policy"]["Document"]["Statement"][0]["Action"]
    granted = set(statements["VpcConfigEnis"]["Action"]) | set(_as_list(statements["EksNodeAttachEnis"]["Action"]))
    assert {a for a in cni if not a.startswith("ec2:Describe")} <= granted
    assert "*" not in statements["VpcConfigEnis"]["Resource"]
    assert statements["EksNodeAttachEnis"]["Resource"] == [
        "arn:aws:ec2:us-west-2:222222222222:instance/*",
        "arn:aws:ec2:us-west-2:222222222222:network-interface/*",
    ]
    tags = statements["VpcConfigEniTags"]
    assert tags["Resource"] == "arn:aws:ec2:us-west-2:222222222222:network-interface/*"
    assert "Condition" not in tags  # no source names the tag keys HyperPod itself writes
    assert not {"EksPodIdentity", "EksNodeAttachEnis"} & set(_node_role_sids(synth, "dev"))


def test_hyperpod_slurm_execution_role_manages_the_vpc_interfaces(synth: Synth) -> None:
    """A HyperPod cluster with a VpcConfig: SageMaker creates the nodes' interfaces in the subnet with the role."""
    statements = _node_role_sids(synth, "dev")
    assert {"ec2:DescribeSubnets", "ec2:DescribeDhcpOptions", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcs"} <= set(
        statements["VpcConfigRead"]["Action"]
    )
    enis = statements["VpcConfigEnis"]
    assert {"ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface"} <= set(enis["Action"])
    (cluster,) = synth.resources("dev", "Compute", "AWS::SageMaker::Cluster").values()
    subnet = cluster["Properties"]["VpcConfig"]["Subnets"][0]
    assert {"Fn::Join": ["", ["arn:aws:ec2:us-west-2:111111111111:subnet/", subnet]]} in enis["Resource"]
    assert "arn:aws:ec2:us-west-2:111111111111:network-interface/*" in enis["Resource"]
    assert _as_list(statements["VpcConfigEniTags"]["Action"]) == ["ec2:CreateTags"]


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, str) else list(value)


def test_inference_groups_launch_into_reserved_capacity_and_blocks(synth: Synth) -> None:
    """capacity-eks (the capacity work's test config): reservations and a Capacity Block."""
    groups = _nodegroups(synth, "cap-eks")
    templates = synth.resources("cap-eks", "Compute", "AWS::EC2::LaunchTemplate")
    reserved = groups["fminfra-cap-eks-serve-reserved"]
    data = templates[reserved["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert "CapacityReservationResourceGroupArn" in target
    # hop limit 1: only the node and host-network pods reach IMDS (docs/facts/eks.md#imds-host-network-pods)
    assert "Placement" in data and data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert "CapacityType" not in reserved
    block = groups["fminfra-cap-eks-serve-block"]
    assert block["CapacityType"] == "CAPACITY_BLOCK"
    block_data = templates[block["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]
    assert block_data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
    assert "Placement" not in block_data
    # With starts_at the group waits at 0 and one schedule sizes it at the block's start.
    assert block["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 1}
    # (cap-eks also has the training-plan drain's rate schedule: tests/hyperpod/constructs/test_plan_drain.py.)
    schedules = synth.resources("cap-eks", "Compute", "AWS::Scheduler::Schedule").values()
    (schedule,) = [s for s in schedules if s["Properties"]["ScheduleExpression"].startswith("at(")]
    assert schedule["Properties"]["ScheduleExpression"] == "at(2027-01-10T11:30:00)"
    assert "ScalingConfig" in json.dumps(schedule["Properties"]["Target"]["Input"])


def test_training_operator_gets_a_pod_identity_before_the_add_on(synth: Synth) -> None:
    associations = synth.resources("staging", "Compute", "AWS::EKS::PodIdentityAssociation")
    # The training operator's only (the load balancer controller, with its own, is off in staging); the FSx CSI
    # driver has none (a static volume calls no FSx API: docs/facts/eks.md#fsx-csi-static-provisioning).
    by_account = {(a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]): lid for lid, a in associations.items()}
    assert set(by_account) == {("aws-hyperpod", "hp-training-operator-controller-manager")}
    association_id = by_account["aws-hyperpod", "hp-training-operator-controller-manager"]
    props = associations[association_id]["Properties"]
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    role = synth.resources("staging", "Compute", "AWS::IAM::Role")[role_id]["Properties"]
    assert "AmazonSageMakerHyperPodTrainingOperatorAccess" in json.dumps(role["ManagedPolicyArns"])
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    addons = synth.resources("staging", "Compute", "AWS::EKS::Addon")
    (operator_id,) = [lid for lid, a in addons.items() if a["Properties"]["AddonName"] == "amazon-sagemaker-hyperpod-training-operator"]
    assert association_id in addons[operator_id]["DependsOn"]
    cluster = _one(synth, "staging", "AWS::SageMaker::Cluster")
    assert {"Key": "SageMaker", "Value": "true"} in cluster["Tags"]
    assert synth.resources("hp-slurm-inf", "Compute", "AWS::EKS::PodIdentityAssociation") == {}


def _node_groups_started_before_networking(template: dict[str, Any]) -> list[str]:
    """Managed node groups of a template created without waiting for the VPC CNI and kube-proxy add-ons."""
    resources = template.get("Resources") or {}
    addons = {r["Properties"]["AddonName"]: lid for lid, r in resources.items() if r.get("Type") == "AWS::EKS::Addon"}
    late = []
    for lid, resource in resources.items():
        if resource.get("Type") != "AWS::EKS::Nodegroup":
            continue
        depends = resource.get("DependsOn") or []
        missing = [name for name in NODE_NETWORKING_ADDONS if addons.get(name) not in depends]
        if missing:
            late.append(f"{lid} does not wait for {', '.join(missing)}")
    return late


def test_every_node_group_waits_for_the_node_networking_addons(synth: Synth) -> None:
    """The cluster has no self-managed networking add-ons: a node group started before the VPC CNI
    fails with NodeCreationFailure, so every managed node group (inference and system) waits for it."""
    checked = 0
    problems = []
    for stack in synth.all_templates():
        resources = stack.template.get("Resources") or {}
        checked += sum(1 for r in resources.values() if r.get("Type") == "AWS::EKS::Nodegroup")
        problems += [f"{stack.display_name}: {p}" for p in _node_groups_started_before_networking(stack.template)]
    assert checked >= 5
    assert problems == []


def test_the_node_group_order_check_finds_a_group_without_the_cni(synth: Synth) -> None:
    template = copy.deepcopy(synth.template("staging", "Compute"))
    groups = [lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::EKS::Nodegroup"]
    vpc_cni = next(
        lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "vpc-cni"
    )
    template["Resources"][groups[0]]["DependsOn"].remove(vpc_cni)
    assert _node_groups_started_before_networking(template) == [f"{groups[0]} does not wait for vpc-cni"]


def test_addons_whose_resources_may_exist_overwrite_them(synth: Synth) -> None:
    """The training operator's namespace (aws-hyperpod) is created by the HyperPod dependency chart
    first; AWS's references create that add-on and task governance with ResolveConflicts OVERWRITE."""
    addons = {r["Properties"]["AddonName"]: r["Properties"] for r in synth.resources("staging", "Compute", "AWS::EKS::Addon").values()}
    assert addons["amazon-sagemaker-hyperpod-training-operator"]["ResolveConflicts"] == "OVERWRITE"
    assert addons["amazon-sagemaker-hyperpod-taskgovernance"]["ResolveConflicts"] == "OVERWRITE"
    assert "ResolveConflicts" not in addons["vpc-cni"]


@pytest.mark.parametrize(("env", "expected"), [("staging", "1.34"), ("cap-eks", "1.34"), ("eks-inf", "1.35"), ("eks-kueue", "1.35")])
def test_each_cluster_kind_gets_its_kubernetes_version_and_builds(synth: Synth, env: str, expected: str) -> None:
    """HyperPod EKS: HyperPod's newest (1.34); EKS without HyperPod: the newest in standard support (1.35),
    with that version's kube-proxy build and kubectl layer."""
    template = synth.template(env, "Compute")
    clusters = [r for r in template["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-Cluster" or r["Type"] == "AWS::EKS::Cluster"]
    assert [c["Properties"]["Version"] for c in clusters] == [expected]
    addons = {
        r["Properties"]["AddonName"]: r["Properties"]["AddonVersion"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EKS::Addon"
    }
    assert addons["kube-proxy"].startswith(f"v{expected}.")
    layers = [r["Properties"]["Description"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert any(f"/opt/kubectl/kubectl {expected}." in d for d in layers), layers
