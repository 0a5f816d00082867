"""HyperPod on EKS as AWS requires it, and EKS clusters whose GPUs can be scheduled.

Templates of staging (HyperPod EKS + an inference group), cap-eks (HyperPod EKS + EFA inference
groups) and hp-slurm-inf (an inference-only EKS cluster): the HyperPod dependency chart's
installer and its inputs, one set of device plugins, values that select the configured nodes,
add-on order as a graph over DependsOn and references, and the system node group."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from fminfra.compute.stack.clusters import DEVICE_PLUGIN_VALUE_KEYS, KUBECTL_LAYERS
from fminfra.core.versions import version
from fminfra.hyperpod.constructs.dependencies import CHART_PATH, NAMESPACE, RELEASE, REPOSITORY, RESOURCE_TYPE
from tests.conftest import Synth

HYPERPOD_EKS = ("staging", "cap-eks")

# Top-level `.Values.<key>` references of each chart's templates at the pinned chart version, read
# from the charts' sources (docs/facts/eks.md#chart-nvidia-device-plugin-values and
# #chart-aws-efa-k8s-device-plugin-values). fminfra may set only keys a template reads.
CHART_VALUE_REFERENCES = {
    "nvidia-device-plugin": {
        "affinity",
        "allowDefaultNamespace",
        "cdi",
        "compatWithCPUManager",
        "config",
        "deviceDiscoveryStrategy",
        "deviceIDStrategy",
        "deviceListStrategy",
        "devicePlugin",
        "failOnInitError",
        "fullnameOverride",
        "gdsEnabled",
        "gfd",
        "image",
        "imagePullSecrets",
        "migStrategy",
        "mofedEnabled",
        "mps",
        "nameOverride",
        "namespace",
        "namespaceOverride",
        "nfd",
        "noTimestamp",
        "nodeSelector",
        "nvidiaDevRoot",
        "nvidiaDriverRoot",
        "podAnnotations",
        "podSecurityContext",
        "priorityClassName",
        "resources",
        "runtimeClassName",
        "securityContext",
        "selectorLabelsOverride",
        "sleepInterval",
        "tolerations",
        "updateStrategy",
    },
    "aws-efa-k8s-device-plugin": {
        "additionalPodAnnotations",
        "additionalPodLabels",
        "fullnameOverride",
        "image",
        "imagePullSecrets",
        "nameOverride",
        "nodeSelector",
        "resources",
        "securityContext",
        "serviceAccount",
        "supportedInstanceLabels",
        "tolerations",
        "updateStrategy",
    },
}


# --- the graph ------------------------------------------------------------------------------------


def _references(value: Any) -> Iterator[str]:
    """Logical ids a property value points at (Ref, Fn::GetAtt, ${Id} in Fn::Sub)."""
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            yield value["Ref"]
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            yield target[0] if isinstance(target, list) else target.split(".")[0]
        if "Fn::Sub" in value:
            text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
            yield from (m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text))
        for v in value.values():
            yield from _references(v)
    elif isinstance(value, list):
        for v in value:
            yield from _references(v)


def dependency_graph(template: dict[str, Any]) -> dict[str, set[str]]:
    """Resource -> the resources CloudFormation creates before it (DependsOn and references)."""
    resources = template["Resources"]
    graph: dict[str, set[str]] = {}
    for lid, res in resources.items():
        depends = res.get("DependsOn", [])
        edges = set([depends] if isinstance(depends, str) else depends)
        edges |= {r for r in _references(res.get("Properties", {})) if r in resources}
        graph[lid] = edges
    return graph


def created_before(graph: dict[str, set[str]], lid: str) -> set[str]:
    """Everything `lid` waits for, transitively."""
    seen: set[str] = set()
    todo = [lid]
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _by_type(synth: Synth, env: str, resource_type: str) -> dict[str, dict[str, Any]]:
    return synth.resources(env, "Compute", resource_type)


def _charts(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {c["Properties"]["Chart"]: c["Properties"] for c in _by_type(synth, env, "Custom::AWSCDK-EKS-HelmChart").values()}


def _addon_ids(synth: Synth, env: str) -> dict[str, str]:
    return {a["Properties"]["AddonName"]: lid for lid, a in _by_type(synth, env, "AWS::EKS::Addon").items()}


def _one_id(synth: Synth, env: str, resource_type: str) -> str:
    (lid,) = _by_type(synth, env, resource_type)
    return lid


def test_graph_helpers_see_depends_on_and_references() -> None:
    # The test of the test: an edge through each form, and none invented.
    template = {
        "Resources": {
            "A": {"Type": "X"},
            "B": {"Type": "X", "DependsOn": "A"},
            "C": {"Type": "X", "Properties": {"P": {"Fn::GetAtt": ["B", "Arn"]}}},
            "D": {"Type": "X", "Properties": {"P": {"Fn::Sub": "arn:${C}:${AWS::Region}"}}},
            "E": {"Type": "X", "Properties": {"P": [{"Ref": "AWS::Partition"}]}},
        }
    }
    graph = dependency_graph(template)
    assert created_before(graph, "D") == {"A", "B", "C"}
    assert created_before(graph, "E") == set()


@pytest.mark.parametrize("env", HYPERPOD_EKS)
def test_add_on_order(synth: Synth, env: str) -> None:
    """cert-manager and the Pod Identity agent before the training operator; the HyperPod cluster
    after its prerequisite add-ons and the dependency chart; the training operator after HyperPod."""
    graph = dependency_graph(synth.template(env, "Compute"))
    addons = _addon_ids(synth, env)
    hyperpod = _one_id(synth, env, "AWS::SageMaker::Cluster")
    chart = _one_id(synth, env, RESOURCE_TYPE)
    cluster = _one_id(synth, env, "AWS::EKS::Cluster")
    operator = addons["amazon-sagemaker-hyperpod-training-operator"]
    before_hyperpod = created_before(graph, hyperpod)
    assert {addons[a] for a in ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")} <= before_hyperpod
    assert chart in before_hyperpod
    assert operator not in before_hyperpod  # the defect: HyperPod used to wait for the operator
    before_operator = created_before(graph, operator)
    assert {hyperpod, addons["cert-manager"], addons["eks-pod-identity-agent"]} <= before_operator
    # the training operator's association (staging also has the load balancer controller's)
    associations = _by_type(synth, env, "AWS::EKS::PodIdentityAssociation").items()
    (operator_association,) = [lid for lid, a in associations if a["Properties"]["Namespace"] == "aws-hyperpod"]
    assert operator_association in before_operator
    before_chart = created_before(graph, chart)
    assert {cluster, addons["vpc-cni"]} <= before_chart
    access = [lid for lid in before_chart if _by_type(synth, env, "AWS::EKS::AccessEntry").get(lid)]
    assert len(access) == 1  # the installer's own cluster-admin access entry
    for lid in graph:
        assert lid not in created_before(graph, lid), f"{lid} is in a cycle"


def test_system_nodes_before_coredns(synth: Synth) -> None:
    graph = dependency_graph(synth.template("hp-slurm-inf", "Compute"))
    addons = _addon_ids(synth, "hp-slurm-inf")
    system = [
        lid
        for lid, n in _by_type(synth, "hp-slurm-inf", "AWS::EKS::Nodegroup").items()
        if n["Properties"]["NodegroupName"].endswith("-system")
    ]
    (system_id,) = system
    assert system_id in created_before(graph, addons["coredns"])
    assert {addons["vpc-cni"], addons["kube-proxy"]} <= created_before(graph, system_id)


# --- the installer ---------------------------------------------------------------------------------


@pytest.mark.parametrize("env", HYPERPOD_EKS)
def test_dependency_chart_installer_inputs(synth: Synth, env: str) -> None:
    (resource,) = _by_type(synth, env, RESOURCE_TYPE).values()
    props = resource["Properties"]
    cluster = _one_id(synth, env, "AWS::EKS::Cluster")
    assert props["ClusterName"] == {"Ref": cluster}
    assert (props["Repository"], props["ChartPath"], props["Release"], props["Namespace"]) == (
        "aws/sagemaker-hyperpod-cli",
        "helm_chart/HyperPodHelmChart",
        "hyperpod-dependencies",
        "kube-system",
    )
    assert (REPOSITORY, CHART_PATH, RELEASE, NAMESPACE) == (
        "aws/sagemaker-hyperpod-cli",
        "helm_chart/HyperPodHelmChart",
        "hyperpod-dependencies",
        "kube-system",
    )
    assert props["Commit"] == version("HYPERPOD_CLI_COMMIT")
    assert len(props["Commit"]) == 40
    region = synth.configs[env].region
    assert json.loads(props["Values"]) == {"health-monitoring-agent": {"region": region}}
    assert resource["Properties"]["ServiceTimeout"] == "960"  # CDK writes it as a string
    function_id = props["ServiceToken"]["Fn::GetAtt"][0]
    function = _by_type(synth, env, "AWS::Lambda::Function")[function_id]["Properties"]
    vpc = function["VpcConfig"]
    assert vpc["SecurityGroupIds"] == [{"Fn::GetAtt": [cluster, "ClusterSecurityGroupId"]}]
    eks_subnets = synth.resources(env, "Compute", "AWS::EKS::Cluster")[cluster]["Properties"]["ResourcesVpcConfig"]["SubnetIds"]
    assert vpc["SubnetIds"] == eks_subnets  # the private subnets (NAT) the private endpoint is in
    layers = function["Layers"]
    assert len(layers) == 1 and _by_type(synth, env, "AWS::Lambda::LayerVersion")[layers[0]["Ref"]]
    assert function["Handler"] == "index.on_event" and function["Timeout"] == 900
    role_id = function["Role"]["Fn::GetAtt"][0]
    entries = [e["Properties"] for e in _by_type(synth, env, "AWS::EKS::AccessEntry").values()]
    (entry,) = [e for e in entries if e["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])
    assert entry["AccessPolicies"][0]["AccessScope"] == {"Type": "cluster"}


def test_no_installer_without_hyperpod_eks(synth: Synth) -> None:
    for env in ("hp-slurm-inf", "dev"):
        assert _by_type(synth, env, RESOURCE_TYPE) == {}


def test_kubectl_layer_follows_the_kubernetes_version() -> None:
    supported = version("EKS_SUPPORTED_KUBERNETES_VERSIONS").split(",")
    assert sorted(KUBECTL_LAYERS) == sorted(supported)
    for minor, layer in KUBECTL_LAYERS.items():
        assert layer.__name__ == f"KubectlV{minor.split('.')[1]}Layer"
        assert layer.__module__ == f"aws_cdk.lambda_layer_kubectl_v{minor.split('.')[1]}"


# --- device plugins --------------------------------------------------------------------------------


def _values(chart: dict[str, Any]) -> dict[str, Any]:
    return json.loads(chart["Values"]) if "Values" in chart else {}


def _selected_types(chart_name: str, values: dict[str, Any]) -> set[str]:
    if chart_name == "nvidia-device-plugin":
        terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        return {
            v for term in terms for e in term["matchExpressions"] if e["key"] == "node.kubernetes.io/instance-type" for v in e["values"]
        }
    assert values["supportedInstanceLabels"]["keys"] == ["node.kubernetes.io/instance-type"]
    return set(values["supportedInstanceLabels"]["values"])


@pytest.mark.parametrize("env", [*HYPERPOD_EKS, "hp-slurm-inf"])
def test_device_plugins_select_the_inference_groups_only(synth: Synth, env: str) -> None:
    """fminfra's plugins select exactly the inference groups' EC2 types (EFA: the EFA types among
    them), never an ml. type, so on HyperPod EKS they never run beside the dependency chart's."""
    cfg = synth.configs[env]
    groups = cfg.compute.inference_node_groups
    charts = {name: c for name, c in _charts(synth, env).items() if name in DEVICE_PLUGIN_VALUE_KEYS}
    assert _selected_types("nvidia-device-plugin", _values(charts["nvidia-device-plugin"])) == {g.spec.name for g in groups}
    efa = {g.spec.name for g in groups if g.spec.training}
    if efa:
        assert _selected_types("aws-efa-k8s-device-plugin", _values(charts["aws-efa-k8s-device-plugin"])) == efa
    else:
        assert "aws-efa-k8s-device-plugin" not in charts
    for name, chart in charts.items():
        assert not any(t.startswith("ml.") for t in _selected_types(name, _values(chart)))
        assert chart["Namespace"] == "kube-system" and chart["Release"] == name


@pytest.mark.parametrize("env", ["staging", "hp-slurm-inf"])
def test_device_plugins_tolerate_the_groups_taints(synth: Synth, env: str) -> None:
    taints = {(t.key, t.effect) for g in synth.configs[env].compute.inference_node_groups for t in g.taints} or {
        ("nvidia.com/gpu", "NoSchedule")
    }
    for name, chart in _charts(synth, env).items():
        if name not in DEVICE_PLUGIN_VALUE_KEYS:
            continue
        tolerations = _values(chart)["tolerations"]
        assert all(t["operator"] == "Exists" for t in tolerations)
        assert taints <= {(t["key"], t.get("effect")) for t in tolerations}
    assert {("nvidia.com/gpu", "NoSchedule")} <= taints


def test_values_keys_are_read_by_the_pinned_charts(synth: Synth) -> None:
    for env in ("staging", "cap-eks", "hp-slurm-inf"):
        for name, chart in _charts(synth, env).items():
            if name in DEVICE_PLUGIN_VALUE_KEYS:
                keys = set(_values(chart))
                assert keys == set(DEVICE_PLUGIN_VALUE_KEYS[name])
                assert keys <= CHART_VALUE_REFERENCES[name], f"{name}: {keys - CHART_VALUE_REFERENCES[name]} not read by the chart"
    # The test of the test: a key the chart never reads (nodeSelectorTerms belongs under affinity).
    assert not {"nodeSelectorTerms"} <= CHART_VALUE_REFERENCES["nvidia-device-plugin"]


def test_hyperpod_eks_without_inference_groups_has_no_fminfra_device_plugin(synth: Synth) -> None:
    from fminfra.compute.stack.clusters import device_plugin_charts
    from fminfra.config import parse_config

    raw = json.loads(synth.configs["staging"].model_dump_json(exclude_none=True))
    raw["compute"]["inference_node_groups"] = []
    cfg = parse_config(raw, "staging-no-inference.yaml")
    assert device_plugin_charts(cfg) == []


# --- system pods ----------------------------------------------------------------------------------


def _system_groups(synth: Synth, env: str) -> list[dict[str, Any]]:
    return [
        n["Properties"]
        for n in _by_type(synth, env, "AWS::EKS::Nodegroup").values()
        if n["Properties"]["NodegroupName"].endswith("-system")
    ]


def test_inference_only_cluster_gets_a_system_node_group(synth: Synth) -> None:
    (group,) = _system_groups(synth, "hp-slurm-inf")
    assert group["InstanceTypes"] == ["m6i.large"]
    assert group["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert group["AmiType"] == "AL2023_x86_64_STANDARD"
    assert "Taints" not in group and group["Labels"] == {"fminfra/role": "system"}


@pytest.mark.parametrize("env", HYPERPOD_EKS)
def test_hyperpod_eks_runs_system_pods_on_lasting_hyperpod_nodes(synth: Synth, env: str) -> None:
    """On demand HyperPod nodes hold the system pods; a group on a training plan does not (its nodes go at
    the plan's end), so cap-eks, whose only group is on one, gets the two system nodes."""
    if synth.configs[env].compute.untainted_node_sources():
        assert env != "cap-eks" and _system_groups(synth, env) == []
    else:
        (group,) = _system_groups(synth, env)
        assert env == "cap-eks" and group["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}


def _tolerates(tolerations: list[dict[str, str]], key: str, value: str, effect: str) -> bool:
    """Kubernetes' rule: a toleration matches a taint when the effects match (or it names none) and,
    with operator Exists, the key matches (or it names none), with Equal the key and the value."""
    for t in tolerations:
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator", "Equal") == "Exists" and t.get("key") in (None, "", key):
            return True
        if t.get("operator", "Equal") == "Equal" and t.get("key") == key and t.get("value") == value:
            return True
    return False


# The taints a cert-manager pod meets before the HyperPod nodes are ready: HyperPod's while deep
# health checks run (docs/facts/eks.md#hyperpod-node-health-taint) and the inference groups' default GPU taint.
_TAINTS = [("sagemaker.amazonaws.com/node-health-status", "Unschedulable", "NoSchedule"), ("nvidia.com/gpu", "true", "NoSchedule")]


@pytest.mark.parametrize("env", HYPERPOD_EKS)
def test_cert_manager_runs_on_nodes_still_in_health_checks(synth: Synth, env: str) -> None:
    """The training operator needs cert-manager's webhook: its three deployments tolerate every taint,
    as AWS's own add-on template configures them (docs/facts/eks.md#eks-addon-cert-manager-tolerations)."""
    addon = _by_type(synth, env, "AWS::EKS::Addon")[_addon_ids(synth, env)["cert-manager"]]
    values = json.loads(addon["Properties"]["ConfigurationValues"])
    for part in (values, values["webhook"], values["cainjector"]):
        for taint in _TAINTS:
            assert _tolerates(part["tolerations"], *taint), (part, taint)


def test_toleration_check_can_fail() -> None:
    assert not _tolerates([], *_TAINTS[0])
    assert not _tolerates([{"operator": "Exists", "effect": "NoExecute"}], *_TAINTS[0])
    assert not _tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], *_TAINTS[0])
    assert _tolerates([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}], *_TAINTS[1])
