"""Serving (docs/serving.md): the `serving:` section's rules, each with the broken input it refuses; the
objects of a served model; and the example environment (examples/serving.yaml) as synthesized."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from fminfra.serving.constructs.serving import (
    TRIGGER_AUTHENTICATION,
    ServedModelSpec,
    model_objects,
    namespace_objects,
    server_args,
)
from fminfra.serving.rules import (
    HEALTH_PATH,
    IN_FLIGHT_METRICS,
    MODEL_LABEL,
    QUEUE_METRIC,
    ROLE_LABEL,
    ROLE_SERVER,
    ROLE_WORKER,
    SERVER_PORT,
    Shape,
    keda_query,
    parallelism_problems,
    replica_shape,
)
from tests.app.test_readme_eks import manifest_text
from tests.conftest import ROOT

EXAMPLE = yaml.safe_load((ROOT / "examples" / "serving.yaml").read_text())
ENV = EXAMPLE["name"]


def _with(change: dict[str, Any] | None = None, **model: Any) -> dict[str, Any]:
    """The example with the first model's fields replaced (`...` deletes one), and `change` applied
    to the top level (dotted keys)."""
    data = copy.deepcopy(EXAMPLE)
    first = data["serving"]["models"][0]
    for key, value in model.items():
        if value is ...:
            first.pop(key, None)
        else:
            first[key] = value
    for dotted, value in (change or {}).items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "s.yaml")
    return info.value.problems


def test_the_example_is_valid() -> None:
    cfg = parse_config(copy.deepcopy(EXAMPLE), "s.yaml")
    assert cfg.serving is not None and [m.name for m in cfg.serving.models] == ["chat-8b", "chat-405b"]
    assert not [w for w in cfg.warnings() if w.path.startswith("serving")]


BAD = [
    # (model fields, top-level change, the expected message's part)
    (
        {"tensor_parallel": 3},
        None,
        "s.yaml: serving.models[0].tensor_parallel: must divide the model's attention heads (32), as vLLM requires; got 3; "
        "allowed on g6e.12xlarge: 1, 2, 4",
    ),
    ({"pipeline_parallel": 2, "hidden_layers": ...}, None, "serving.models[0].hidden_layers: must be stated with pipeline_parallel 2"),
    ({"pipeline_parallel": 8, "tensor_parallel": 1, "hidden_layers": 4}, None, "must be at most the model's hidden layers (4), got 8"),
    ({"tensor_parallel": 8, "attention_heads": 64}, None, "must be at most the GPUs of one g6e.12xlarge node (4), got 8"),
    (
        {"tensor_parallel": 2, "pipeline_parallel": 3, "hidden_layers": 32},
        None,
        "tensor_parallel x pipeline_parallel (6) must be at most 4 (one g6e.12xlarge node) or a multiple of it",
    ),
    (
        {"replicas": {"min": 0, "max": 2}},
        None,
        "serving.models[0].replicas.min: must be at least 1, got 0: a replica at 0 would never wake",
    ),
    ({"replicas": {"min": 3, "max": 2}}, None, "serving.models[0].replicas.max: must be at least min (3), got 2"),
    # chat-8b takes all 4 GPUs of a g6e.12xlarge: 4 replicas need 4 nodes, the group has at most 3
    (
        {"replicas": {"min": 4, "max": 4}},
        None,
        "the minimum replicas on node group 'chat' (4 GPUs per g6e.12xlarge node) need 4 nodes; the group has 3 (max_size)",
    ),
    ({"replicas": {"min": 3, "max": 3}}, None, None),
    ({"tensor_parallel": 2, "replicas": {"min": 6, "max": 6}}, None, None),  # two replicas per node: 3 nodes
    ({}, {"serving.namespace": "keda"}, "serving.namespace: must not be a namespace fminfra, its charts or Kubernetes run in"),
    ({"node_group": "nope"}, None, "serving.models[0].node_group: must name an inference node group, got 'nope'; allowed: big, chat"),
    ({"name": "Chat"}, None, "serving.models[0].name: must be 1-40 lowercase letters"),
    ({"served_name": "bad name"}, None, "serving.models[0].served_name: must be 1-128 letters"),
    ({"weights": {"source": "s3", "path": "/models/x/"}}, None, "serving.models[0].weights.path: must be a key prefix"),
    ({"weights": {"source": "fsx", "path": "/fsx/elsewhere/x"}}, None, "must lie under a data repository association's folder"),
    ({"weights": {"source": "fsx", "path": "/data/x"}}, None, "serving.models[0].weights.path: must be a folder under /fsx"),
    ({}, {"storage": ...}, "serving.models[0].weights.source: s3 reads the environment's data bucket: add a storage section"),
    ({}, {"compute.eks.load_balancer_controller": False}, "compute.eks.load_balancer_controller: must be true with serving"),
    ({}, {"observability.prometheus": False}, "serving.models[0].replicas.max: scaling (max above min) queries the servers' queue in AMP"),
    ({}, {"serving.image": "docker.io/vllm/vllm-openai:v0.31.0"}, "serving.image: must be an image pinned by digest"),
    ({}, {"serving.namespace": "kube-system"}, "serving.namespace: must not be a namespace fminfra, its charts or Kubernetes run in"),
    ({"name": "chat-405b"}, None, "serving.models[1].name: 'chat-405b' is also models[0]'s name"),
    ({}, {"serving.stream_idle_timeout_seconds": 30}, "serving.stream_idle_timeout_seconds: Input should be greater than or equal to 60"),
]


@pytest.mark.parametrize(("model", "change", "expected"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_each_rule_refuses_its_broken_input(model: dict[str, Any], change: dict[str, Any] | None, expected: str | None) -> None:
    data = _with(change, **model)
    if expected is None:
        parse_config(data, "s.yaml")
        return
    problems = _problems(data)
    assert any(expected in p for p in problems), problems
    assert all(p.startswith("s.yaml: ") for p in problems)


def test_a_multi_node_minimum_must_fit_the_group() -> None:
    data = _with()
    data["serving"]["models"][1]["replicas"] = {"min": 2, "max": 2}
    assert any("node group 'big' (8 GPUs per p5.48xlarge node) need 4 nodes; the group has 2 (max_size)" in p for p in _problems(data))


def test_models_sharing_a_group_are_counted_together() -> None:
    data = _with(replicas={"min": 2, "max": 3})
    second = copy.deepcopy(data["serving"]["models"][0])
    second.update(name="chat-8b-b", served_name="b", replicas={"min": 2, "max": 2})
    data["serving"]["models"].append(second)
    assert any("node group 'chat' (4 GPUs per g6e.12xlarge node) need 4 nodes; the group has 3" in p for p in _problems(data))


def test_a_team_namespace_is_refused() -> None:
    # fminfra's Kueue without teams: the default team `training`, whose namespace is `training`
    data = _with({"serving.namespace": "training", "compute.eks.scheduling": {"kueue": True}, "compute.eks.karpenter": {"enabled": False}})
    for group in data["compute"]["inference_node_groups"]:
        group.update(desired_size=2, max_size=2)
    assert any("serving.namespace: 'training' is a team's namespace, which its queues create" in p for p in _problems(data))
    data["serving"]["namespace"] = "serving"
    parse_config(data, "s.yaml")


def test_warnings_name_tcp_only_replicas_and_fixed_groups() -> None:
    data = _with(tensor_parallel=4, pipeline_parallel=2, hidden_layers=32)
    data["compute"]["inference_node_groups"][0]["max_size"] = 4
    cfg = parse_config(data, "s.yaml")
    assert any("which get no EFA interfaces: its stages talk over TCP" in w.message for w in cfg.warnings())
    data = _with({"compute.eks.karpenter": {"enabled": False}})
    for group in data["compute"]["inference_node_groups"]:
        group.update(desired_size=2, max_size=2)
    cfg = parse_config(data, "s.yaml")
    assert any(w.path == "serving.models[0].replicas.max" and "replicas beyond its nodes stay pending" in w.message for w in cfg.warnings())


def test_parallelism_rules_directly() -> None:
    assert (
        parallelism_problems(
            tensor_parallel=8, pipeline_parallel=2, attention_heads=128, hidden_layers=126, gpus_per_node=8, instance_type="p5.48xlarge"
        )
        == []
    )
    assert replica_shape(8, 2, 8) == Shape(nodes=2, gpus_per_pod=8)
    assert replica_shape(4, 1, 4) == Shape(nodes=1, gpus_per_pod=4)
    assert replica_shape(2, 2, 8) == Shape(nodes=1, gpus_per_pod=4)


def _spec(**overrides: Any) -> ServedModelSpec:
    base: dict[str, Any] = {
        "name": "m",
        "served_name": "org/m",
        "image": "docker.io/vllm/vllm-openai:v0@sha256:" + "0" * 64,
        "model": "s3://bucket/models/m/",
        "s3_prefix": "models/m/",
        "shape": Shape(nodes=1, gpus_per_pod=4),
        "tensor_parallel": 4,
        "pipeline_parallel": 1,
        "node_selector": {"node.kubernetes.io/instance-type": "g6e.12xlarge"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        "replicas_min": 1,
        "replicas_max": 3,
    }
    return ServedModelSpec(**{**base, **overrides})


def _objects(spec: ServedModelSpec) -> dict[str, dict[str, Any]]:
    objects = model_objects(
        spec, namespace="serving", region="us-west-2", server_address="https://aps.example/workspaces/ws-1", idle_timeout=600
    )
    return {o["kind"]: o for o in objects}


def test_a_single_node_model_is_a_deployment_scaled_by_keda() -> None:
    objects = _objects(_spec())
    assert set(objects) == {"ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "ScaledObject"}
    deployment = objects["Deployment"]
    assert "replicas" not in deployment["spec"]  # KEDA owns the count
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:5] == ["s3://bucket/models/m/", "--served-model-name", "org/m", "--port", str(SERVER_PORT)]
    assert "--load-format" in container["args"] and container["args"][container["args"].index("--load-format") + 1] == "runai_streamer"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert container["readinessProbe"]["httpGet"]["path"] == HEALTH_PATH
    assert pod["serviceAccountName"] == "m-server" and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    trigger = objects["ScaledObject"]["spec"]["triggers"][0]
    assert trigger["metadata"]["query"] == keda_query("org/m", "serving") and trigger["authenticationRef"]["name"] == TRIGGER_AUTHENTICATION
    assert objects["ScaledObject"]["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "m"}


def test_a_fixed_model_has_its_count_and_no_scaler() -> None:
    objects = _objects(_spec(replicas_min=2, replicas_max=2))
    assert "ScaledObject" not in objects and objects["Deployment"]["spec"]["replicas"] == 2


def test_a_multi_node_model_is_a_leader_worker_set_whose_leader_alone_serves() -> None:
    spec = _spec(
        shape=Shape(nodes=2, gpus_per_pod=8),
        tensor_parallel=8,
        pipeline_parallel=2,
        efa_interfaces=32,
        model="/fsx/models/m",
        s3_prefix=None,
    )
    objects = _objects(spec)
    lws = objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 2 and lws["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = lws["leaderTemplate"], lws["workerTemplate"]
    assert leader["metadata"]["labels"][ROLE_LABEL] == ROLE_SERVER and worker["metadata"]["labels"][ROLE_LABEL] == ROLE_WORKER
    leader_args, worker_args = leader["spec"]["containers"][0]["args"], worker["spec"]["containers"][0]["args"]
    assert "--headless" in worker_args and "--headless" not in leader_args
    for args in (leader_args, worker_args):
        assert args[args.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)" and args[args.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert "ports" not in worker["spec"]["containers"][0] and "readinessProbe" not in worker["spec"]["containers"][0]
    assert leader["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fminfra-fsx", "readOnly": True}} in leader["spec"]["volumes"]
    # the Service selects the leaders only; the budget covers the whole group
    assert objects["Service"]["spec"]["selector"] == {MODEL_LABEL: "m", ROLE_LABEL: ROLE_SERVER}
    assert objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == {MODEL_LABEL: "m"}
    assert objects["ScaledObject"]["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_the_service_is_an_internal_nlb_health_checked_on_the_server() -> None:
    annotations = _objects(_spec())["Service"]["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer-"
    assert annotations[f"{prefix}scheme"] == "internal" and annotations[f"{prefix}type"] == "external"
    assert annotations[f"{prefix}nlb-target-type"] == "ip" and annotations[f"{prefix}healthcheck-path"] == HEALTH_PATH
    assert annotations[f"{prefix}listener-attributes.TCP-80"] == "tcp.idle_timeout.seconds=600"


def test_worker_args_differ_from_the_leaders_by_headless_only() -> None:
    spec = _spec(shape=Shape(nodes=2, gpus_per_pod=8))
    assert server_args(spec, worker=True) == [*server_args(spec), "--headless"]


def test_the_namespace_carries_the_trigger_authentication_only_where_a_model_scales() -> None:
    assert [o["kind"] for o in namespace_objects("serving", scaling=True)] == ["Namespace", "TriggerAuthentication"]
    assert namespace_objects("serving", scaling=True)[1]["spec"] == {"podIdentity": {"provider": "aws"}}
    assert [o["kind"] for o in namespace_objects("serving", scaling=False)] == ["Namespace"]
    assert namespace_objects("serving", scaling=False)[0]["metadata"]["labels"] == {"elbv2.k8s.aws/pod-readiness-gate-inject": "enabled"}


def test_the_service_comes_before_the_server_it_gates() -> None:
    kinds = [o["kind"] for o in model_objects(_spec(), namespace="s", region="r", server_address="https://a", idle_timeout=600)]
    assert kinds.index("Service") < kinds.index("Deployment")


def test_the_queue_metric_is_the_recorded_servers() -> None:
    assert QUEUE_METRIC == "vllm:num_requests_waiting"


# --- the example environment, synthesized --------------------------------------------------------


def _manifests(synth: Any) -> list[dict[str, Any]]:
    out = []
    for resource in synth.resources(ENV, "Compute", "Custom::AWSCDK-EKS-KubernetesResource").values():
        out += json.loads(manifest_text(resource["Properties"]["Manifest"]))
    return out


def _charts(synth: Any) -> dict[str, dict[str, Any]]:
    return {r["Properties"]["Release"]: r for r in synth.resources(ENV, "Compute", "Custom::AWSCDK-EKS-HelmChart").values()}


def test_the_example_installs_keda_and_lws_after_the_load_balancer_controller(synth: Any) -> None:
    charts = _charts(synth)
    lbc = next(
        lid
        for lid, r in synth.resources(ENV, "Compute", "Custom::AWSCDK-EKS-HelmChart").items()
        if r["Properties"]["Release"] == "aws-load-balancer-controller"
    )
    for release, namespace in (("keda", "keda"), ("lws", "lws-system")):
        assert charts[release]["Properties"]["Namespace"] == namespace
        assert lbc in charts[release]["DependsOn"]


def test_the_example_serves_one_model_on_one_node_and_one_across_two(synth: Any) -> None:
    kinds = {(o["kind"], o["metadata"].get("name")) for o in _manifests(synth)}
    assert {("Deployment", "chat-8b"), ("LeaderWorkerSet", "chat-405b"), ("Service", "chat-8b-api"), ("Service", "chat-405b-api")} <= kinds
    # LeaderWorkerSet names its headless Service (the pods' subdomain) after itself: no Service of fminfra's may take it
    assert not {name for kind, name in kinds if kind == "Service"} & {name for kind, name in kinds if kind == "LeaderWorkerSet"}
    assert ("ScaledObject", "chat-8b") in kinds and ("ScaledObject", "chat-405b") not in kinds


def test_pod_identity_gives_keda_the_query_and_the_8b_server_its_prefix(synth: Any) -> None:
    associations = synth.resources(ENV, "Compute", "AWS::EKS::PodIdentityAssociation")
    pairs = {(a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]) for a in associations.values()}
    assert {("keda", "keda-operator"), ("serving", "chat-8b-server")} <= pairs
    assert ("serving", "chat-405b-server") not in pairs  # FSx weights: no S3 role
    policies = synth.resources(ENV, "Compute", "AWS::IAM::Policy")
    statements = [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    query = [s for s in statements if "aps:QueryMetrics" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    assert query and all(s["Resource"] != "*" for s in query)


def test_the_scraper_keeps_the_servers(synth: Any) -> None:
    import base64

    scraper = next(iter(synth.resources(ENV, "Compute", "AWS::APS::Scraper").values()))
    blob = scraper["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]
    config = yaml.safe_load(base64.b64decode(blob))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "vllm")
    kept = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    assert kept[("__meta_kubernetes_pod_container_port_number",)] == str(SERVER_PORT)
    assert kept[("__meta_kubernetes_namespace",)] == "serving"
    assert kept[("__meta_kubernetes_pod_label_fminfra_serving_role",)] == ROLE_SERVER


# --- against the recorded schemas (tests/data/crds: Kubernetes v1.34.0, KEDA 2.20.2, LWS v0.10.0) ----------


def _all_objects() -> list[dict[str, Any]]:
    single = _spec()
    multi = _spec(
        name="n",
        shape=Shape(nodes=2, gpus_per_pod=8),
        tensor_parallel=8,
        pipeline_parallel=2,
        efa_interfaces=32,
        model="/fsx/m",
        s3_prefix=None,
    )
    fixed = _spec(name="f", replicas_min=2, replicas_max=2)
    out = namespace_objects("serving", scaling=True)
    for spec in (single, multi, fixed):
        out += model_objects(
            spec, namespace="serving", region="us-west-2", server_address="https://aps.example/workspaces/ws-1", idle_timeout=600
        )
    return out


def test_every_object_validates_against_the_recorded_schemas() -> None:
    from tests.fakes.k8s_schemas import validate

    objects = _all_objects()
    assert {o["kind"] for o in objects} >= {
        "Namespace",
        "TriggerAuthentication",
        "ServiceAccount",
        "Deployment",
        "LeaderWorkerSet",
        "Service",
        "PodDisruptionBudget",
        "ScaledObject",
    }
    assert {o["kind"]: validate(o) for o in objects} == {o["kind"]: [] for o in objects}


@pytest.mark.parametrize(
    ("kind", "breaks"),
    [
        ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"].update(size="two")),
        ("ScaledObject", lambda o: o["spec"]["triggers"][0].pop("type")),
        ("Service", lambda o: o["spec"]["ports"][0].update(port="eighty")),
        ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(readinessProbes={})),
    ],
)
def test_the_schema_check_fails_on_a_broken_object(kind: str, breaks: Any) -> None:
    from tests.fakes.k8s_schemas import validate

    obj = copy.deepcopy(next(o for o in _all_objects() if o["kind"] == kind))
    breaks(obj)
    assert validate(obj)


def test_the_synthesized_manifests_validate(synth: Any) -> None:
    from tests.fakes.k8s_schemas import validate

    serving = [
        o
        for o in _manifests(synth)
        if MODEL_LABEL in (o["metadata"].get("labels") or {}) or o["kind"] == "TriggerAuthentication" or o["metadata"]["name"] == "serving"
    ]
    assert len(serving) >= 10
    assert {f"{o['kind']}/{o['metadata']['name']}": validate(o) for o in serving} == {
        f"{o['kind']}/{o['metadata']['name']}": [] for o in serving
    }


# --- the scaler's query, with promtool, on the series recorded from the pinned server (tests/data/vllm) ------


def _series_name(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _queue_test(query: str) -> dict[str, Any]:
    """A promtool test: the recorded gauges as AMP holds them (the scraper adds `exporter_namespace`),
    with a second model's and another namespace's copies of the in-flight gauges, and the query's expected
    value: the recorded running plus waiting requests of the model alone."""
    from tests.serving.test_vllm_recording import parse_exposition, recording

    families = parse_exposition(recording().read_text(encoding="utf-8"), recording().name)
    series = []
    for family in families.values():
        if family.type != "gauge":
            continue
        for name, labels, value in family.samples:
            series.append({"series": _series_name(name, {**labels, "exporter_namespace": "serving"}), "values": f"{value:g}x3"})
    in_flight = 0.0
    for metric in IN_FLIGHT_METRICS:
        (name, labels, value), *_ = families[metric].samples
        in_flight += value
        series.append({"series": _series_name(name, {**labels, "model_name": "other", "exporter_namespace": "serving"}), "values": "50x3"})
        series.append({"series": _series_name(name, {**labels, "exporter_namespace": "elsewhere"}), "values": "70x3"})
    model = families[QUEUE_METRIC].samples[0][1]["model_name"]
    return {
        "model": model,
        "in_flight": in_flight,
        "waiting": families[QUEUE_METRIC].samples[0][2],
        "file": {
            "rule_files": [],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": series,
                    "promql_expr_test": [{"expr": query, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": in_flight}]}],
                }
            ],
        },
    }


def _promtool(tmp_path: Any, test: dict[str, Any]) -> Any:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `make setup` installs it (Debian package prometheus)"
    (tmp_path / "q.test.yaml").write_text(yaml.safe_dump(test["file"], sort_keys=False))
    return subprocess.run([promtool, "test", "rules", "q.test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False)


def test_the_scaler_query_reads_the_recorded_queue_of_its_model_only(tmp_path: Any) -> None:
    from tests.serving.test_vllm_recording import recorded_metrics

    assert recorded_metrics()[QUEUE_METRIC][0] == "gauge"
    probe = _queue_test("")
    test = _queue_test(keda_query(probe["model"], "serving"))
    assert test["in_flight"] > test["waiting"] > 0, "the recording should have running and waiting requests"
    result = _promtool(tmp_path, test)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "broken",
    [
        'sum(vllm:num_requests_waiting{model_name="MODEL",namespace="serving"})',  # the scraper's label is exporter_namespace
        'sum(vllm:gpu_cache_usage_perc{model_name="MODEL",exporter_namespace="serving"})',  # a removed name
        "sum(vllm:num_requests_waiting)",  # every model's queue
        # the queue alone (serving read 2, B1: 0 whenever the replicas keep up, so the busy replicas would be removed)
        'sum(vllm:num_requests_waiting{model_name="MODEL",exporter_namespace="serving"})',
    ],
)
def test_the_promtool_check_fails_on_a_broken_query(tmp_path: Any, broken: str) -> None:
    probe = _queue_test("")
    result = _promtool(tmp_path, _queue_test(broken.replace("MODEL", probe["model"])))
    assert result.returncode != 0


def test_fsx_weights_take_vllms_lustre_default_and_s3_weights_are_streamed() -> None:
    fsx = server_args(_spec(model="/fsx/models/m", s3_prefix=None))
    # not "eager": every rank would read every file whole (16 x the checkpoint for 405B at 8 x 2)
    assert "--safetensors-load-strategy" not in fsx and "--load-format" not in fsx
    s3 = server_args(_spec())
    assert s3[s3.index("--load-format") + 1] == "runai_streamer"


def test_the_lws_controller_fits_beside_karpenter(synth: Any) -> None:
    values = json.loads(_charts(synth)["lws"]["Properties"]["Values"])
    assert values["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}


def test_a_replica_across_karpenter_nodes_stays_in_the_compute_az(synth: Any) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _manifests(synth)}
    lws = objects[("LeaderWorkerSet", "chat-405b")]["spec"]["leaderWorkerTemplate"]
    for template in (lws["leaderTemplate"], lws["workerTemplate"]):
        assert template["spec"]["nodeSelector"]["topology.k8s.aws/zone-id"] == EXAMPLE["network"]["compute_az_id"]
    single = objects[("Deployment", "chat-8b")]["spec"]["template"]["spec"]
    assert "topology.k8s.aws/zone-id" not in single["nodeSelector"]  # one node: any zone of the pool
    assert single["enableServiceLinks"] is False


def test_scale_down_is_the_hpas_after_its_window() -> None:
    spec = _objects(_spec())["ScaledObject"]["spec"]
    assert "cooldownPeriod" not in spec  # KEDA's applies only to scaling to zero
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600


def test_the_serving_gate_reads_the_services_and_nothing_else(synth: Any) -> None:
    """The acceptance role's access to the example's cluster (serving.gate_access): one access entry with the group
    fminfra-accept (no HyperPod acceptance access here), and a Role in the serving namespace that gets Services."""
    entries = synth.resources(ENV, "Compute", "AWS::EKS::AccessEntry")
    gate = [e["Properties"] for e in entries.values() if e["Properties"].get("KubernetesGroups") == ["fminfra-accept"]]
    assert len(gate) == 1 and "fminfra-serve-accept" in json.dumps(gate[0]["PrincipalArn"])
    roles = [o for o in _manifests(synth) if o["kind"] == "Role" and o["metadata"]["name"] == "fminfra-accept-serving"]
    assert [r["rules"] for r in roles] == [[{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]]
    assert roles[0]["metadata"]["namespace"] == "serving"


def test_a_serving_gate_without_access_is_refused(tmp_path: Any) -> None:
    from fminfra.config.pipeline import load_pipeline

    data = _with({"serving.gate_access": False})
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump(data))
    pipeline = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    pipeline["environments"] = [{"config": str(config), "accept": {"runs_on": ["self-hosted"], "serving": []}}]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert any("accept.serving_gate: on, but" in p and "set serving.gate_access: true there" in p for p in info.value.problems)


def test_every_probe_waits_longer_than_kubernetes_default() -> None:
    """Serving read 2, B3: Kubernetes' 1 s probe timeout pulls a busy server from the load balancer and restarts it."""
    container = _objects(_spec())["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["timeoutSeconds"] >= 5, probe
    assert {"name": "VLLM_NO_USAGE_STATS", "value": "1"} in container["env"]


def test_the_nlb_balances_across_zones() -> None:
    annotations = _objects(_spec())["Service"]["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-attributes"] == "load_balancing.cross_zone.enabled=true"


def test_a_full_group_replaces_replicas_in_place() -> None:
    """Serving read 2, B2: with no room for one more replica, the default surge would start a pod that never schedules
    and the rollout would never finish; fminfra then replaces one replica at a time (and validate says so)."""
    data = _with(replicas={"min": 1, "max": 3})  # chat-8b takes a whole g6e.12xlarge; the group has at most 3
    cfg = parse_config(data, "s.yaml")
    assert cfg.serving_surges("chat-8b") is False
    assert any("has no room for one more replica at replicas.max" in w.message for w in cfg.warnings())
    data = _with(replicas={"min": 1, "max": 2})
    cfg = parse_config(data, "s.yaml")
    assert cfg.serving_surges("chat-8b") is True
    assert not any("has no room for one more replica" in w.message for w in cfg.warnings())
    in_place = _objects(_spec(surge=False))["Deployment"]["spec"]["strategy"]
    assert in_place == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert "strategy" not in _objects(_spec())["Deployment"]["spec"]


def test_the_weights_reader_reads_and_lists_its_prefix_only(synth: Any) -> None:
    """Serving read 3, C1: CDK's grant_read lists the whole bucket; the reader may list and read the model's prefix only."""
    policies = synth.resources(ENV, "Compute", "AWS::IAM::Policy")
    reader = next(p for lid, p in policies.items() if "Readerchat8b" in lid)
    statements = reader["Properties"]["PolicyDocument"]["Statement"]
    listing = next(s for s in statements if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["models/llama-3-1-8b-instruct/*"]}}
    reads = next(s for s in statements if s["Action"] == "s3:GetObject")
    assert "models/llama-3-1-8b-instruct/*" in json.dumps(reads["Resource"])
    assert not [s for s in statements if "s3:List*" in json.dumps(s["Action"])]
