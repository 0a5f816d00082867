"""fminfra's Kueue on EKS without HyperPod: opt-in, pinned, waitForPodsReady set,
a queue per team over the inference groups' GPUs.

hp-slurm-inf (Slurm + an inference-only EKS cluster) opts in with two teams; eks-inf (inference
only) keeps the default, no Kueue. Checked against Kueue's own sources at the pinned version
(kubernetes-sigs/kueue @ v0.19.2; docs/facts/eks.md#chart-kueue): the values keys the chart's
templates read, the fields of Kueue's Configuration type, and the v1beta2 CRD schemas of
ResourceFlavor, ClusterQueue and LocalQueue (recorded in tests/data/kueue/, see SOURCES.md).
Each check is shown to fail on a deliberately broken input.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from aws_cdk import Stack

from fminfra.config import parse_config, read_yaml
from fminfra.core.errors import ConfigError, ValidationError
from fminfra.core.versions import version
from fminfra.eks.constructs.kueue import API_VERSION, GPU_RESOURCE, REPOSITORY, VALUE_KEYS, GpuFlavor, Kueue, KueueProps
from fminfra.eks.rules import team_queue
from tests.conftest import Synth
from tests.hyperpod.constructs.test_eks import created_before, dependency_graph

ROOT = Path(__file__).resolve().parents[3]
ENV = "hp-slurm-inf"
CRD_SCHEMAS: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "kueue" / "crd-schemas-v0.19.2.json").read_text())
# Top-level `.Values.<key>` references of the chart's templates at 0.19.2
# (`git grep -o '\.Values\.[a-zA-Z]*' v0.19.2 -- charts/kueue/templates`).
CHART_VALUE_REFERENCES = {
    "certManager", "controllerManager", "enableCertManager", "enableKueueViz", "enableMutatingAdmissionPolicy",
    "enablePrometheus", "enableVisibilityAPF", "enableVisibilityAuthReaderRoleBinding", "fullnameOverride",
    "kubernetesClusterDomain", "kueueViz", "managerConfig", "metrics", "metricsService", "mutatingWebhook",
    "nameOverride", "serviceAccount", "webhookService",
}  # fmt: skip
# JSON fields of Kueue's config.kueue.x-k8s.io/v1beta2 types at v0.19.2
# (apis/config/v1beta2/configuration_types.go; Configuration embeds ControllerManager inline).
CONFIG_FIELDS: dict[str, set[str]] = {
    "": {
        "apiVersion", "kind", "namespace", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "internalCertManagement",
        "waitForPodsReady", "clientConnection", "integrations", "multiKueue", "fairSharing", "admissionFairSharing", "resources",
        "featureGates", "objectRetentionPolicies", "visibilityServer",
        "webhook", "leaderElection", "metrics", "health", "pprofBindAddress", "controller", "tls",
    },
    "waitForPodsReady": {"timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"},
    "resources": {"quotaCheckStrategy", "excludeResourcePrefixes", "transformations", "deviceClassMappings"},
    "integrations": {"frameworks", "externalFrameworks", "labelKeysToCopy"},
    "health": {"healthProbeBindAddress", "readinessEndpointName", "livenessEndpointName"},
    "metrics": {"bindAddress", "enableClusterQueueResources", "customLabels", "localQueueMetrics"},
    "webhook": {"port", "host", "certDir"},
}  # fmt: skip


def _charts(synth: Synth, env: str) -> dict[str, tuple[str, dict[str, Any]]]:
    found = synth.resources(env, "Compute", "Custom::AWSCDK-EKS-HelmChart")
    return {c["Properties"]["Chart"]: (lid, c["Properties"]) for lid, c in found.items()}


def _kueue_objects(synth: Synth, env: str) -> tuple[str, list[dict[str, Any]]]:
    manifests = synth.resources(env, "Compute", "Custom::AWSCDK-EKS-KubernetesResource")
    found = [(lid, json.loads(m["Properties"]["Manifest"])) for lid, m in manifests.items() if "KueueQueues" in lid]
    ((lid, objects),) = found
    return lid, objects


def _configuration(props: dict[str, Any]) -> dict[str, Any]:
    return dict(yaml.safe_load(json.loads(props["Values"])["managerConfig"]["controllerManagerConfigYaml"]))


# --- the chart --------------------------------------------------------------------------------------


def test_chart_is_pinned_and_only_where_the_config_opts_in(synth: Synth) -> None:
    lid, props = _charts(synth, ENV)["kueue"]
    assert (props["Repository"], props["Version"], props["Namespace"], props["Release"]) == (
        REPOSITORY,
        version("CHART_KUEUE_VERSION"),
        "kueue-system",
        "kueue",
    )
    assert version("CHART_KUEUE_VERSION") == "0.19.2"
    assert props["Wait"] is True and props["CreateNamespace"] is True
    assert "kueue" not in _charts(synth, "eks-inf")  # inference-only clusters default to no Kueue
    graph = dependency_graph(synth.template(ENV, "Compute"))
    queues, _ = _kueue_objects(synth, ENV)
    assert lid in created_before(graph, queues)  # the CRDs and webhooks before the objects


def test_values_keys_are_read_by_the_pinned_chart(synth: Synth) -> None:
    _, props = _charts(synth, ENV)["kueue"]
    keys = set(json.loads(props["Values"]))
    assert keys == set(VALUE_KEYS) and keys <= CHART_VALUE_REFERENCES
    assert "waitForPodsReady" not in CHART_VALUE_REFERENCES  # the test of the test: a key the chart does not read


def config_problems(config: dict[str, Any]) -> list[str]:
    """Fields of the configuration that Kueue's v1beta2 types do not have."""
    found = [f"{k}: not a Configuration field" for k in config if k not in CONFIG_FIELDS[""]]
    for section, fields in CONFIG_FIELDS.items():
        if section and isinstance(config.get(section), dict):
            found += [f"{section}.{k}: not a field" for k in config[section] if k not in fields]
    return found


def test_configuration_turns_on_wait_for_pods_ready(synth: Synth) -> None:
    config = _configuration(_charts(synth, ENV)["kueue"][1])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["waitForPodsReady"] == {"timeout": "30m", "blockAdmission": False}
    assert config["resources"] == {"quotaCheckStrategy": "IgnoreUndeclared"}
    assert config_problems(config) == []
    broken = {**config, "waitForPodsReady": {"enable": True, "timeout": "30m"}, "waitForPodReady": {}}
    assert config_problems(broken) == ["waitForPodReady: not a Configuration field", "waitForPodsReady.enable: not a field"]


# --- the queue objects ------------------------------------------------------------------------------


def unknown_fields(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Fields the structural schema does not declare (the API server would prune them silently)."""
    if isinstance(value, dict) and "properties" in schema:
        found = []
        for key, sub in value.items():
            if key not in schema["properties"]:
                found.append(f"{path}{key}")
            else:
                found += unknown_fields(schema["properties"][key], sub, f"{path}{key}.")
        return found
    if isinstance(value, list) and "items" in schema:
        return [p for item in value for p in unknown_fields(schema["items"], item, path)]
    return []


def object_problems(obj: dict[str, Any]) -> list[str]:
    if obj["kind"] == "Namespace":
        return []
    schema = CRD_SCHEMAS[obj["kind"]]
    body = {k: v for k, v in obj.items() if k != "metadata"}
    found = [f"{obj['kind']}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(body)]
    return found + [f"{obj['kind']}: unknown field {f}" for f in unknown_fields(schema, body)]


def test_objects_match_the_crd_schemas(synth: Synth) -> None:
    _, objects = _kueue_objects(synth, ENV)
    assert {o["kind"] for o in objects} == {"ResourceFlavor", "Namespace", "ClusterQueue", "LocalQueue"}
    assert all(o["apiVersion"] == API_VERSION for o in objects if o["kind"] != "Namespace")
    assert [p for o in objects for p in object_problems(o)] == []


@pytest.mark.parametrize(
    ("kind", "change", "expected"),
    [
        ("ClusterQueue", lambda s: s["resourceGroups"][0].pop("coveredResources"), "'coveredResources' is a required property"),
        ("ClusterQueue", lambda s: s.update(cohort="shared"), "unknown field spec.cohort"),  # v1beta1's name; v1beta2: cohortName
        ("LocalQueue", lambda s: s.update(clusterQueue=7), "is not of type 'string'"),
        ("ResourceFlavor", lambda s: s.update(nodeSelector={}), "unknown field spec.nodeSelector"),
    ],
)
def test_schema_check_flags_broken_objects(synth: Synth, kind: str, change: Any, expected: str) -> None:
    _, objects = _kueue_objects(synth, ENV)
    obj = copy.deepcopy(next(o for o in objects if o["kind"] == kind))
    change(obj["spec"])
    assert any(expected in p for p in object_problems(obj)), object_problems(obj)


def test_quotas_and_queue_names_follow_the_config(synth: Synth) -> None:
    cfg = synth.configs[ENV]
    _, objects = _kueue_objects(synth, ENV)
    quotas = {
        o["metadata"]["name"].removesuffix("-clusterqueue"): {
            f["name"]: r["nominalQuota"]
            for g in o["spec"]["resourceGroups"]
            for f in g["flavors"]
            for r in f["resources"]
            if r["name"] == GPU_RESOURCE
        }
        for o in objects
        if o["kind"] == "ClusterQueue"
    }
    # serving: 1 x p5.48xlarge (8 GPUs) and 3 x g6.xlarge (1 GPU each); batch: 1 x p5.48xlarge.
    assert {t: {k: v for k, v in q.items() if v} for t, q in quotas.items()} == cfg.compute.kueue_quotas()
    assert cfg.compute.kueue_quotas() == {"serving": {"p5.48xlarge": 8, "g6.xlarge": 3}, "batch": {"p5.48xlarge": 8}}
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"] for o in objects if o["kind"] == "LocalQueue"}
    for team in quotas:
        queue = team_queue("eks", team)
        assert local[(queue.namespace, queue.local_queue)] == f"{team}-clusterqueue"
    flavors = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ResourceFlavor"}
    assert set(flavors) == {"p5.48xlarge", "g6.xlarge"}
    for name, spec in flavors.items():
        assert spec["nodeLabels"] == {"node.kubernetes.io/instance-type": name}
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in spec["tolerations"]


# --- the config -------------------------------------------------------------------------------------


INFERENCE = read_yaml(ROOT / "tests" / "configs" / "eks-inference-only.yaml")


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def _inference(scheduling: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(INFERENCE)
    data["compute"]["eks"] = {"scheduling": scheduling}
    return data


def test_default_team_holds_every_inference_gpu_at_max_size() -> None:
    cfg = parse_config(_inference({"kueue": True}), "f.yaml")
    assert cfg.compute.kueue_quotas() == {"training": {"g5.12xlarge": 16}}  # 4 nodes x 4 GPUs
    assert parse_config(INFERENCE, "f.yaml").compute.kueue_quotas() == {}


@pytest.mark.parametrize(
    ("scheduling", "expected"),
    [
        (
            {"kueue": True, "teams": [{"name": "a", "instances": {"serve-g5": 5}}]},
            "compute.eks.scheduling.teams: the teams hold 5 instances of group 'serve-g5', whose max_size is 4; allowed: at most 4 in all",
        ),
        (
            {"kueue": True, "teams": [{"name": "kube-system", "instances": {"serve-g5": 1}}]},
            "compute.eks.scheduling.teams[0].name: 'kube-system' is a reserved namespace",
        ),
        ({"kueue": True, "priority_classes": {"a": 1}}, "compute.eks.scheduling.priority_classes: priority classes are task governance's"),
        (
            {"kueue": True, "task_governance": True},
            "compute.eks.scheduling.task_governance: HyperPod task governance needs orchestrator eks",
        ),
        ({"teams": [{"name": "a"}]}, "compute.eks.scheduling: only with orchestrator eks (HyperPod task governance) or kueue: true"),
    ],
)
def test_config_rejects(scheduling: dict[str, Any], expected: str) -> None:
    assert expected in _error(_inference(scheduling))


def test_no_fminfra_kueue_on_hyperpod_eks() -> None:
    data = read_yaml(ROOT / "config" / "staging.yaml")
    data["compute"]["eks"]["scheduling"] = {"kueue": True}
    assert _error(data) == (
        "f.yaml: compute.eks.scheduling.kueue: HyperPod EKS runs task governance's Kueue and no second one; allowed: false"
    )


@pytest.mark.parametrize(("team", "ok"), [("a" * 52, True), ("a" * 53, False), ("a" * 63, False)])
def test_construct_rejects_a_team_whose_queue_label_is_too_long(team: str, ok: bool) -> None:
    """`<team>-localqueue` is the value of the jobs' queue label (at most 63 characters), so a team name
    that is a valid namespace (up to 63) may still make an invalid label past 52 characters."""
    assert len(team_queue("eks", team).local_queue) == len(team) + len("-localqueue")
    flavor = GpuFlavor(instance_type="g6e.12xlarge")
    props = KueueProps(cluster=None, version="0.19.2", flavors=[flavor], teams={team: {"g6e.12xlarge": 4}})  # type: ignore[arg-type]
    if ok:
        with pytest.raises(AttributeError):  # past validation: the construct reaches for the (absent) cluster
            Kueue(Stack(), "Kueue", props)
        return
    with pytest.raises(ValidationError) as info:
        Kueue(Stack(), "Kueue", props)
    assert str(info.value) == (
        f"team {team!r}: its queue {team + '-localqueue'!r} is a label value of at most 63 characters, got {len(team) + 11}; "
        "allowed: team names of at most 52 characters"
    )


def test_docs_say_kueue_0_19_defaults_wait_for_pods_ready_on_and_how_to_check_task_governance() -> None:
    """Kueue >= 0.19 turns waitForPodsReady on by default (docs/facts/eks.md#chart-kueue); what task
    governance's managed configuration holds is unknown, so the docs give the first-deploy check, in
    compute.md's scheduling section and first-job.md's HyperPod EKS steps (the old text said "off by
    default, in Kueue and in task governance" and had no check)."""
    compute = (ROOT / "docs" / "compute.md").read_text()
    section = compute[compute.index("### Teams, quotas, all-or-nothing") : compute.index("### Kueue on EKS without HyperPod")]
    first_job = (ROOT / "docs" / "first-job.md").read_text()
    steps = first_job[first_job.index("### From `cdk deploy` to a passing run (HyperPod EKS)") :]
    steps = steps[: steps.index("\n### ")]
    assert "off by default, in Kueue" not in section
    assert "Kueue 0.19 and later turn it on by default" in section and "not known to fminfra" in section
    for text in (section, steps):
        assert "kubectl get configmap -n kueue-system" in text
        assert "kubectl get clusterqueue hyperpod-ns-" in text and "-clusterqueue -o yaml" in text
        assert "vpc.amazonaws.com/efa" in text and "unavailable in ClusterQueue" in text


def _kueue_chart_without_a_node(template: dict[str, Any]) -> str | None:
    """Why the Kueue chart could start with no node for its controller, or None: it must wait for a
    node group that can run it (the system group, or an inference group with nodes and no repelling taint)."""
    resources = template["Resources"]
    (chart,) = [lid for lid, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kueue"]
    before = created_before(dependency_graph(template), chart)
    groups = [lid for lid in before if resources[lid]["Type"] == "AWS::EKS::Nodegroup"]
    for lid in groups:
        props = resources[lid]["Properties"]
        taints = props.get("Taints") or []
        if props["ScalingConfig"]["DesiredSize"] > 0 and not any(t["Effect"] in ("NO_SCHEDULE", "NO_EXECUTE") for t in taints):
            return None
    return f"{chart} waits for no node group its controller can run on (waits for: {', '.join(sorted(groups)) or 'none'})"


@pytest.mark.parametrize("env", [ENV, "eks-kueue"])
def test_the_kueue_chart_waits_for_nodes_its_controller_runs_on(synth: Synth, env: str) -> None:
    """hp-slurm-inf: the system node group; eks-kueue (no system group): its untainted inference group.
    helm waits up to 15 minutes (CDK's maximum; 5 by default) for the controller."""
    template = synth.template(env, "Compute")
    assert _kueue_chart_without_a_node(template) is None
    (_, props) = _charts(synth, env)["kueue"]
    assert props["Timeout"] == "900s"


def test_the_node_wait_check_finds_a_chart_that_waits_for_no_node(synth: Synth) -> None:
    template = copy.deepcopy(synth.template("eks-kueue", "Compute"))
    (lid, _) = _charts(synth, "eks-kueue")["kueue"]
    chart = template["Resources"][lid]
    chart["DependsOn"] = [d for d in chart["DependsOn"] if template["Resources"][d]["Type"] != "AWS::EKS::Nodegroup"]
    assert (_kueue_chart_without_a_node(template) or "").startswith(f"{lid} waits for no node group")
