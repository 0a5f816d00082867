"""fminfra's Kueue on EKS without HyperPod: opt-in, pinned, waitForPodsReady set,
a queue per team over the inference groups' GPUs.

hp-slurm-inf (Slurm + an inference-only EKS cluster) opts in with two teams; eks-inf (inference
only) keeps the default, no Kueue. Checked against Kueue's own sources at the pinned version
(kubernetes-sigs/kueue @ v0.19.2; docs/facts/eks.md#chart-kueue): the values keys the chart's
templates read, the fields of Kueue's Configuration type, and the v1beta2 CRD schemas of
ResourceFlavor, ClusterQueue, LocalQueue and Topology (recorded in tests/data/kueue/, see SOURCES.md),
with the CEL rules of Topology and ResourceFlavor checked in Python (jsonschema runs no CEL).
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

from fminfra.compute.stack.clusters import kueue_flavors
from fminfra.config import parse_config, read_yaml
from fminfra.core.errors import ConfigError, ValidationError
from fminfra.core.versions import version
from fminfra.eks.constructs.kueue import API_VERSION, GPU_RESOURCE, REPOSITORY, VALUE_KEYS, GpuFlavor, Kueue, KueueProps, kueue_objects
from fminfra.eks.rules import team_queue
from fminfra.topology import rules as topology
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


# The CEL rules (`x-kubernetes-validations`) of the recorded schemas that bind what fminfra writes,
# as Python: (kind, path of the value the rule is on, rule as recorded) -> check(value, old value).
# A transition rule (oldSelf) holds on create (old None: the API server skips it then).
CelCheck = Any
CEL_RULES: dict[tuple[str, str, str], CelCheck] = {
    ("Topology", "spec.levels", "self == oldSelf"): lambda new, old: old is None or new == old,
    ("Topology", "spec.levels", "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0"): (
        lambda new, old: len({json.dumps(level, sort_keys=True) for level in new}) == len(new)
    ),
    (
        "Topology",
        "spec.levels",
        "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
    ): lambda new, old: topology.HOSTNAME_LABEL not in [lv["nodeLabel"] for lv in new] or new[-1]["nodeLabel"] == topology.HOSTNAME_LABEL,
    ("ResourceFlavor", "spec", "!has(self.topologyName) || self.nodeLabels.size() >= 1"): (
        lambda new, old: "topologyName" not in new or len(new.get("nodeLabels") or {}) >= 1
    ),
    (
        "ResourceFlavor",
        "spec",
        "!has(oldSelf.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && (!has(self.nodeLabels) || self.nodeLabels == oldSelf.nodeLabels))",
    ): lambda new, old: old is None or "topologyName" not in old or new.get("nodeLabels") == old.get("nodeLabels"),
    (
        "ResourceFlavor",
        "spec",
        "!has(oldSelf.topologyName) || (has(self.tolerations) == has(oldSelf.tolerations) && (!has(self.tolerations) || self.tolerations == oldSelf.tolerations))",
    ): lambda new, old: old is None or "topologyName" not in old or new.get("tolerations") == old.get("tolerations"),
    ("ResourceFlavor", "spec", "!has(oldSelf.topologyName) || (has(self.topologyName) && self.topologyName == oldSelf.topologyName)"): (
        lambda new, old: old is None or "topologyName" not in old or new.get("topologyName") == old["topologyName"]
    ),
}  # fmt: skip


def _at(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _schema_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for key in path.split("."):
        schema = schema["properties"][key]
    return schema


def cel_problems(obj: dict[str, Any], old: dict[str, Any] | None = None, schemas: dict[str, Any] = CRD_SCHEMAS) -> list[str]:
    """The CEL rules of `CEL_RULES`' paths that `obj` (updating `old`, if given) breaks, by the
    recorded message; a rule at those paths that `CEL_RULES` does not know is a problem too."""
    found: list[str] = []
    for path in sorted({p for kind, p, _ in CEL_RULES if kind == obj["kind"]}):
        value = _at(obj, path)
        if value is None:
            continue
        for rule in _schema_at(schemas[obj["kind"]], path).get("x-kubernetes-validations", []):
            check = CEL_RULES.get((obj["kind"], path, rule["rule"]))
            if check is None:
                found.append(f"{obj['kind']}: {path}: CEL rule not checked here: {rule['rule']}")
            elif not check(value, _at(old, path) if old else None):
                found.append(f"{obj['kind']}: {path}: {rule['message']}")
    return found


def test_objects_match_the_crd_schemas(synth: Synth) -> None:
    _, objects = _kueue_objects(synth, ENV)
    assert {o["kind"] for o in objects} == {"ResourceFlavor", "Namespace", "ClusterQueue", "LocalQueue"}
    assert all(o["apiVersion"] == API_VERSION for o in objects if o["kind"] != "Namespace")
    assert [p for o in objects for p in object_problems(o) + cel_problems(o)] == []
    _, objects = _kueue_objects(synth, "eks-kueue")
    assert {o["kind"] for o in objects} >= {"Topology", "ResourceFlavor"}
    assert [p for o in objects for p in object_problems(o) + cel_problems(o)] == []


# --- topology-aware scheduling ----------------------------------------------------------------------


def _props(teams: dict[str, dict[str, int]], karpenter: tuple[str, ...] = ()) -> KueueProps:
    types = sorted({t for gpus in teams.values() for t in gpus})
    flavors = [GpuFlavor(instance_type=t, topology_aware=t not in karpenter) for t in types]
    return KueueProps(cluster=None, version="0.19.2", flavors=flavors, teams=teams)  # type: ignore[arg-type]


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Name -> spec; a ResourceFlavor by its instance type (a topology-aware flavor's name carries a hash)."""
    if kind == "ResourceFlavor":
        return {o["spec"]["nodeLabels"]["node.kubernetes.io/instance-type"]: o["spec"] for o in objects if o["kind"] == kind}
    return {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == kind}


def _flavor_types(objects: list[dict[str, Any]]) -> dict[str, str]:
    """ResourceFlavor name -> its instance type."""
    return {
        o["metadata"]["name"]: o["spec"]["nodeLabels"]["node.kubernetes.io/instance-type"] for o in objects if o["kind"] == "ResourceFlavor"
    }


def test_one_topology_per_layer_depth_and_a_flavor_per_type_names_its_own() -> None:
    objects = kueue_objects(_props({"a": {"p5.48xlarge": 8}, "b": {"p6-b200.48xlarge": 16}, "c": {"g6.xlarge": 1}}))
    layer = "topology.k8s.aws/network-node-layer-"
    assert _by_kind(objects, "Topology") == {
        "fminfra-network-3-layers": {
            "levels": [{"nodeLabel": f"{layer}{n}"} for n in (1, 2, 3)] + [{"nodeLabel": "kubernetes.io/hostname"}]
        },
        "fminfra-network-4-layers": {
            "levels": [{"nodeLabel": f"{layer}{n}"} for n in (1, 2, 3, 4)] + [{"nodeLabel": "kubernetes.io/hostname"}]
        },
    }
    flavors = _by_kind(objects, "ResourceFlavor")
    assert flavors["p5.48xlarge"]["topologyName"] == "fminfra-network-3-layers"
    assert flavors["p6-b200.48xlarge"]["topologyName"] == "fminfra-network-4-layers"
    assert "topologyName" not in flavors["g6.xlarge"]  # no EC2 topology: a plain flavor
    assert [o["kind"] for o in objects][:2] == ["Topology", "Topology"]  # before the flavors naming them
    assert [p for o in objects for p in object_problems(o) + cel_problems(o)] == []
    names = set(_by_kind(objects, "Topology"))
    assert all(f["topologyName"] in names for f in flavors.values() if "topologyName" in f)


def test_a_team_holding_a_plain_type_keeps_its_other_types_plain() -> None:
    """Kueue v0.19.2 refuses an unannotated pod set on a topology-aware flavor of a ClusterQueue that
    also has plain flavors (docs/facts/eks.md#kueue-tas-cluster-queue-mixing): serving's p5 jobs would
    stop being admitted, so p5 stays plain, and then p4d too, which team mixed holds beside p5."""
    teams = {"serving": {"p5.48xlarge": 8, "g6.xlarge": 3}, "mixed": {"p5.48xlarge": 8, "p4d.24xlarge": 8}, "solo": {"p5e.48xlarge": 8}}
    objects = kueue_objects(_props(teams))
    flavors = _by_kind(objects, "ResourceFlavor")
    assert {name for name, f in flavors.items() if "topologyName" in f} == {"p5e.48xlarge"}
    types = _flavor_types(objects)
    for name, spec in _by_kind(objects, "ClusterQueue").items():
        listed = [types[f["name"]] for g in spec["resourceGroups"] for f in g["flavors"]]
        assert len({"topologyName" in flavors[f] for f in listed}) == 1, name  # no queue mixes
        assert listed == sorted(teams[name.removesuffix("-clusterqueue")]), name  # only the types the team holds


def test_flavors_of_nodes_karpenter_starts_stay_plain() -> None:
    flavors = _by_kind(kueue_objects(_props({"a": {"p5.48xlarge": 8}}, karpenter=("p5.48xlarge",))), "ResourceFlavor")
    assert "topologyName" not in flavors["p5.48xlarge"]
    assert not _by_kind(kueue_objects(_props({"a": {"p5.48xlarge": 8}}, karpenter=("p5.48xlarge",))), "Topology")


def test_topology_aware_flavors_only_with_kueue_topology() -> None:
    """Off by default: in a queue of topology-aware flavors Kueue admits no pod set that requests none of
    the queue's GPUs unless it shares a podset-group-name (docs/facts/eks.md#kueue-tas-cluster-queue-mixing)."""
    data = read_yaml(ROOT / "tests" / "configs" / "eks-kueue-untainted.yaml")
    assert all(f.topology_aware for f in kueue_flavors(parse_config(data, "f.yaml")))
    del data["compute"]["eks"]["scheduling"]["kueue_topology"]
    flavors = kueue_flavors(parse_config(data, "f.yaml"))
    assert flavors and not any(f.topology_aware for f in flavors)
    data = read_yaml(ROOT / "tests" / "configs" / "eks-karpenter.yaml")
    data["compute"]["eks"]["scheduling"] = {"kueue": True}
    assert not any(f.topology_aware for f in kueue_flavors(parse_config(data, "f.yaml")))


def test_kueue_topology_is_refused_with_karpenter() -> None:
    data = read_yaml(ROOT / "tests" / "configs" / "eks-karpenter.yaml")
    data["compute"]["eks"]["scheduling"] = {"kueue": True}
    parse_config(data, "f.yaml")  # the test of the test: Kueue itself is allowed with Karpenter
    data["compute"]["eks"]["scheduling"]["kueue_topology"] = True
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "f.yaml")
    assert any("eks.scheduling.kueue_topology" in p and "allowed with karpenter: false" in p for p in exc.value.problems), (
        exc.value.problems
    )


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda d: d.update(region="eu-south-1"), "kueue_topology", "EC2 describes no instance topology in eu-south-1"),
        (lambda d: d["compute"]["eks"]["scheduling"].update(kueue=False), "scheduling", "or kueue: true"),
    ],
)
def test_kueue_topology_is_refused_where_it_cannot_place(edit: Any, field: str, message: str) -> None:
    data = read_yaml(ROOT / "tests" / "configs" / "eks-kueue-untainted.yaml")
    edit(data)
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "f.yaml")
    assert any(field in p and message in p for p in exc.value.problems), exc.value.problems


def test_a_flavor_change_kueue_refuses_in_place_is_a_new_flavor() -> None:
    """Kueue makes a topology-aware flavor's topologyName, nodeLabels and tolerations immutable: every
    change fminfra can make to a flavor either keeps its name with a spec the update rules allow, or
    gives it a new name (a new object; the kubectl provider prunes the old one). Checked over every
    pair of states: plain, topology-aware, with and without taints, 3 and 4 layers."""
    states = []
    for tolerations in ((), ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},)):
        for aware in (False, True):
            for instance_type in ("p5.48xlarge", "p6-b200.48xlarge"):
                flavor = GpuFlavor(instance_type=instance_type, tolerations=tolerations, topology_aware=aware)
                props = KueueProps(cluster=None, version="0.19.2", flavors=[flavor], teams={"a": {instance_type: 8}})  # type: ignore[arg-type]
                states += [o for o in kueue_objects(props) if o["kind"] == "ResourceFlavor"]
    pairs = [(old, new) for old in states for new in states if old["metadata"]["name"] == new["metadata"]["name"]]
    assert len(pairs) > len(states)  # some names are kept (plain flavors by type), so this is a real check
    assert [(o["metadata"]["name"], cel_problems(n, o)) for o, n in pairs if cel_problems(n, o)] == []
    # the test of the test: the same states all named by type, as before, break the rules
    by_type = [{**o, "metadata": {"name": o["spec"]["nodeLabels"]["node.kubernetes.io/instance-type"]}} for o in states]
    assert any(cel_problems(n, o) for o in by_type for n in by_type if o["metadata"] == n["metadata"])


def test_the_synthesized_topology_of_an_untainted_g6e_cluster(synth: Synth) -> None:
    _, objects = _kueue_objects(synth, "eks-kueue")
    assert set(_by_kind(objects, "Topology")) == {"fminfra-network-3-layers"}
    assert _by_kind(objects, "ResourceFlavor")["g6e.12xlarge"]["topologyName"] == "fminfra-network-3-layers"
    assert topology.job_topology_levels("g6e.12xlarge", hyperpod=False) == tuple(
        lv["nodeLabel"] for lv in _by_kind(objects, "Topology")["fminfra-network-3-layers"]["levels"][:-1]
    )


def _topology(levels: list[str]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Topology", "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


@pytest.mark.parametrize(
    ("obj", "old", "expected"),
    [
        (_topology([f"l{n}" for n in range(17)]), None, "is too long"),  # maxItems 16
        (_topology([]), None, "Topology: [] should be non-empty"),  # minItems 1
        (_topology(["a", "a"]), None, "Topology: spec.levels: must be unique"),
        (
            _topology(["kubernetes.io/hostname", "topology.k8s.aws/network-node-layer-1"]),
            None,
            "Topology: spec.levels: the kubernetes.io/hostname label can only be used at the lowest level of topology",
        ),
        (_topology(["a", "b"]), _topology(["a"]), "Topology: spec.levels: field is immutable"),
        (_topology(["bad label!"]), None, "does not match"),
        (
            {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "spec": {"topologyName": "fminfra-network-3-layers"}},
            None,
            "ResourceFlavor: spec: at least one nodeLabel is required when topology is set",
        ),
        (
            {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "spec": {"nodeLabels": {"a": "b"}, "topologyName": "Not_A_Name"}},
            None,
            "does not match",
        ),
        (
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceFlavor",
                "spec": {"nodeLabels": {"a": "b"}, "topologyName": "t", "tolerations": []},
            },
            {"kind": "ResourceFlavor", "spec": {"nodeLabels": {"a": "b"}, "topologyName": "t"}},
            "ResourceFlavor: spec: tolerations are immutable when topologyName is set",
        ),
        (
            {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "spec": {"nodeLabels": {"a": "c"}, "topologyName": "t"}},
            {"kind": "ResourceFlavor", "spec": {"nodeLabels": {"a": "b"}, "topologyName": "t"}},
            "ResourceFlavor: spec: nodeLabels are immutable when topologyName is set",
        ),
        (
            {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "spec": {"nodeLabels": {"a": "b"}}},
            {"kind": "ResourceFlavor", "spec": {"nodeLabels": {"a": "b"}, "topologyName": "t"}},
            "ResourceFlavor: spec: topologyName is immutable when topologyName is set",
        ),
    ],
)
def test_topology_checks_flag_broken_objects(obj: dict[str, Any], old: dict[str, Any] | None, expected: str) -> None:
    found = object_problems(obj) + cel_problems(obj, old)
    assert any(expected in p for p in found), found


def test_a_plain_flavor_may_become_topology_aware_in_place() -> None:
    """Deployed clusters have plain flavors named by type; the transition rules bind only once a
    flavor has a topologyName, so adding one is an allowed update."""
    (old,) = [o for o in kueue_objects(_props({"a": {"p5.48xlarge": 8}}, karpenter=("p5.48xlarge",))) if o["kind"] == "ResourceFlavor"]
    (new,) = [o for o in kueue_objects(_props({"a": {"p5.48xlarge": 8}})) if o["kind"] == "ResourceFlavor"]
    assert "topologyName" in new["spec"] and cel_problems(new, old) == []


def test_an_unknown_cel_rule_is_a_problem() -> None:
    schemas = copy.deepcopy(CRD_SCHEMAS)
    schemas["Topology"]["properties"]["spec"]["properties"]["levels"]["x-kubernetes-validations"].append(
        {"rule": "size(self) < 3", "message": "m"}
    )
    assert cel_problems(_topology(["a"]), schemas=schemas) == ["Topology: spec.levels: CEL rule not checked here: size(self) < 3"]


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
    assert set(flavors) == {"p5.48xlarge", "g6.xlarge"}  # kueue_topology off: plain flavors, named by type
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


def test_validate_warns_where_a_type_with_a_topology_stays_plain() -> None:
    """hp-slurm-inf: `serving` holds p5 and g6, so p5's flavor stays plain; with the teams split so none
    mixes, no warning (the test of the test)."""
    data = read_yaml(ROOT / "tests" / "configs" / "hp-slurm-inference.yaml")
    assert not [w for w in parse_config(data, "f.yaml").compute.warnings() if "Kueue flavor stays plain" in w.message]  # topology off
    data["compute"]["eks"]["scheduling"]["kueue_topology"] = True
    cfg = parse_config(data, "f.yaml")
    found = [w for w in cfg.compute.warnings() if "Kueue flavor stays plain" in w.message]
    assert [(w.path, w.message.split(":")[0]) for w in found] == [("eks.scheduling.teams", "p5.48xlarge")]
    assert "team(s) serving also hold" in found[0].message
    data["compute"]["eks"]["scheduling"]["teams"] = [
        {"name": "serving", "instances": {"serve-g6": 3}},
        {"name": "batch", "instances": {"serve-p5": 2}},
    ]
    split = parse_config(data, "f.yaml")
    assert not [w for w in split.compute.warnings() if "Kueue flavor stays plain" in w.message]
    objects = kueue_objects(KueueProps(cluster=None, version="0.19.2", flavors=kueue_flavors(split), teams=split.compute.kueue_quotas()))  # type: ignore[arg-type]
    assert _by_kind(objects, "ResourceFlavor")["p5.48xlarge"]["topologyName"] == "fminfra-network-3-layers"


def test_kueue_topology_is_task_governances_on_hyperpod_eks() -> None:
    data = read_yaml(ROOT / "config" / "staging.yaml")
    parse_config(data, "f.yaml")  # the test of the test: staging as shipped is valid
    data["compute"]["eks"].setdefault("scheduling", {})["kueue_topology"] = True
    with pytest.raises(ConfigError) as exc:
        parse_config(data, "f.yaml")
    assert any("eks.scheduling.kueue_topology" in p and "task governance places topology-aware" in p for p in exc.value.problems)
