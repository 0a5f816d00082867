"""Serving's rules: the model server's port, health path and queue metric, the labels fminfra puts on
a served model's objects, the names and paths a `serving:` section may hold, and the shape of a
replica (how many nodes and GPUs a model's parallelism takes on its node type).

The server is vLLM's OpenAI-compatible server at the pinned image (docs/facts/vllm.md#vllm-image-pin).
"""

from __future__ import annotations

from dataclasses import dataclass

from fminfra.core.rules import Pattern

# vLLM's API port and health endpoint (docs/facts/vllm.md#vllm-serve-args, #vllm-health-endpoint).
SERVER_PORT = 8000
SERVER_PORT_NAME = "http"
HEALTH_PATH = "/health"
# The load KEDA scales on: the requests a server holds, in its batch and waiting for a slot
# (docs/facts/vllm.md#vllm-metric-names). Waiting alone reads 0 whenever the replicas keep up, and would
# remove the replicas that keep it there.
QUEUE_METRIC = "vllm:num_requests_waiting"
RUNNING_METRIC = "vllm:num_requests_running"
IN_FLIGHT_METRICS = (RUNNING_METRIC, QUEUE_METRIC)
# vLLM's torch.distributed rendezvous port between the nodes of one replica; any free port: the
# multi-node recipe's (docs/facts/vllm.md#vllm-multinode-mp-recipe).
MASTER_PORT = 29500
# The labels fminfra gives a served model's objects and pods: which model, and whether the pod serves
# HTTP (a single-node replica, a multi-node replica's leader) or is a headless worker.
MODEL_LABEL = "fminfra/serving-model"
ROLE_LABEL = "fminfra/serving-role"
ROLE_SERVER = "server"
ROLE_WORKER = "worker"
# Where a server's pod mounts its memory-backed emptyDir: NCCL and vLLM's workers share tensors there.
SHM_MOUNT = "/dev/shm"  # noqa: S108 # a memory-backed volume of the pod, not a temporary file
# The AMP scraper's job of the servers' /metrics.
SCRAPE_JOB = "vllm"
# The serving namespace by default; the charts' own namespaces (created by their charts), which it may not be.
DEFAULT_NAMESPACE = "serving"
KEDA_NAMESPACE = "keda"
LWS_NAMESPACE = "lws-system"
CHART_NAMESPACES = (KEDA_NAMESPACE, LWS_NAMESPACE)
# A model's endpoint Service: `<model>-api`, never `<model>`, which LeaderWorkerSet takes for its headless
# Service (the pods' subdomain, LWS_LEADER_ADDRESS: docs/facts/serving.md#lws-pod-labels-env).
SERVICE_SUFFIX = "-api"
# Karpenter's (and EKS's) label of a node's zone ID: a replica across nodes stays in the compute AZ
# (EFA does not cross zones: docs/facts/serving.md#efa-single-az).
ZONE_ID_LABEL = "topology.k8s.aws/zone-id"
# How long the HPA waits before it removes a replica: fminfra's policy, not a sourced figure (twice the HPA's
# 300 s default scale-down window that KEDA's spec shows, docs/facts/serving.md#keda-polling-cooldown-defaults),
# since a removed GPU replica takes minutes to come back.
SCALE_DOWN_STABILIZATION_SECONDS = 600
# An NLB listener's TCP idle timeout: 60-6000 s, AWS's default 350 s (docs/facts/serving.md#elb-idle-timeout-limits).
# A streamed answer is silent while a long prompt is prefilled: fminfra's default is 600 s.
NLB_IDLE_TIMEOUT_MIN = 60
NLB_IDLE_TIMEOUT_MAX = 6000
DEFAULT_STREAM_IDLE_TIMEOUT = 600
# KEDA's polling interval default (docs/facts/serving.md#keda-polling-cooldown-defaults).
DEFAULT_POLLING_INTERVAL = 30
# fminfra's default target of requests in flight per replica (no public source gives one: size it to the
# concurrency a replica serves within your latency targets, which `accept --serving` measures).
DEFAULT_REQUESTS_PER_REPLICA = 32
# A model's name is in its objects' names (`<name>-<suffix>`, suffixes up to 12 characters, within a DNS label).
MODEL_NAME_MAX = 40
MODEL_NAME = Pattern(
    r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$", f"1-{MODEL_NAME_MAX} lowercase letters, digits and hyphens, starting with a letter"
)
# The name clients ask for in the OpenAI API's `model` field (vLLM's --served-model-name), and the
# model_name label of its metrics.
SERVED_NAME = Pattern(r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$", "1-128 letters, digits and . _ / -, not ending in . _ / -")
# Weights in the data bucket: a key prefix (no leading slash, ending in /); on FSx: a folder under /fsx.
S3_PREFIX = Pattern(r"^(?:[A-Za-z0-9._-]+/)+$", "a key prefix of folders of letters, digits and . _ - ending in / (no leading /)")
FSX_PATH = Pattern(r"^/fsx(?:/[A-Za-z0-9._-]+)+$", "a folder under /fsx: /fsx/<folders> of letters, digits and . _ -")
# An image by digest: registry/repository[:tag]@sha256:<64 hex>.
IMAGE_BY_DIGEST = Pattern(
    r"^[a-z0-9.-]+(?::[0-9]+)?/[a-z0-9._/-]+(?::[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$",
    "an image pinned by digest: registry/repository[:tag]@sha256:<64 hex digits>",
)


@dataclass(frozen=True)
class Shape:
    """A replica on its node type: `nodes` pods (1: a Deployment; more: a LeaderWorkerSet group), each
    with `gpus_per_pod` GPUs."""

    nodes: int
    gpus_per_pod: int

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def replica_shape(tensor_parallel: int, pipeline_parallel: int, gpus_per_node: int) -> Shape:
    """The shape of one replica: its tensor x pipeline GPUs on one node when they fit, else across whole
    nodes (`parallelism_problems` refuses a product that is not a whole number of nodes)."""
    world = tensor_parallel * pipeline_parallel
    if world <= gpus_per_node:
        return Shape(nodes=1, gpus_per_pod=world)
    return Shape(nodes=world // gpus_per_node, gpus_per_pod=gpus_per_node)


def parallelism_problems(
    *, tensor_parallel: int, pipeline_parallel: int, attention_heads: int, hidden_layers: int | None, gpus_per_node: int, instance_type: str
) -> list[tuple[str, str]]:
    """(field, message) for each way the parallelism does not fit the model or the node type.

    - vLLM refuses a tensor-parallel size that does not divide the attention heads
      (docs/facts/vllm.md#vllm-tp-divides-heads);
    - every pipeline stage holds at least one layer, so the layers must be stated with pipeline
      parallelism and be at least as many as the stages (docs/facts/vllm.md#vllm-pp-layers);
    - tensor parallelism stays within one node's GPUs (NVLink), and a replica larger than a node takes
      whole nodes: tensor x pipeline must be at most the node's GPUs or a multiple of them."""
    out: list[tuple[str, str]] = []
    if attention_heads % tensor_parallel:
        divisors = [d for d in range(1, min(attention_heads, gpus_per_node) + 1) if attention_heads % d == 0]
        out.append(
            (
                "tensor_parallel",
                f"must divide the model's attention heads ({attention_heads}), as vLLM requires; got {tensor_parallel}; "
                f"allowed on {instance_type}: {', '.join(map(str, divisors))}",
            )
        )
    if pipeline_parallel > 1 and hidden_layers is None:
        out.append(("hidden_layers", f"must be stated with pipeline_parallel {pipeline_parallel}: each pipeline stage holds whole layers"))
    elif hidden_layers is not None and pipeline_parallel > hidden_layers:
        out.append(("pipeline_parallel", f"must be at most the model's hidden layers ({hidden_layers}), got {pipeline_parallel}"))
    if tensor_parallel > gpus_per_node:
        out.append(
            (
                "tensor_parallel",
                f"must be at most the GPUs of one {instance_type} node ({gpus_per_node}), got {tensor_parallel}: tensor parallelism "
                "stays on a node's NVLink; use pipeline_parallel across nodes",
            )
        )
    else:
        world = tensor_parallel * pipeline_parallel
        if world > gpus_per_node and world % gpus_per_node:
            out.append(
                (
                    "pipeline_parallel",
                    f"tensor_parallel x pipeline_parallel ({world}) must be at most {gpus_per_node} (one {instance_type} node) or a "
                    f"multiple of it (whole nodes), got {tensor_parallel} x {pipeline_parallel}",
                )
            )
    return out


def keda_query(served_name: str, namespace: str) -> str:
    """The PromQL KEDA's Prometheus scaler asks AMP for: the requests in flight (running and waiting) across
    the model's servers, whose series the scraper labels with their namespace as `exporter_namespace`
    (fminfra/observability/constructs/amp_scraper.py)."""
    names = "|".join(IN_FLIGHT_METRICS)
    return f'sum({{__name__=~"{names}",model_name="{served_name}",exporter_namespace="{namespace}"}})'


def service_name(model: str) -> str:
    return f"{model}{SERVICE_SUFFIX}"


def replicas_per_node(shape: Shape, gpus_per_node: int) -> float:
    """How many replicas of `shape` one node holds (a fraction: a replica across nodes)."""
    return gpus_per_node // shape.gpus_per_pod if not shape.multi_node else 1 / shape.nodes


def leader_selector(model: str) -> dict[str, str]:
    """The pod labels of a model's serving pods only: a Deployment's pods and a LeaderWorkerSet's leaders
    (workers run headless: no HTTP server)."""
    return {MODEL_LABEL: model, ROLE_LABEL: ROLE_SERVER}


# MLPerf Inference's Server-scenario latency constraints for the LLM benchmarks, at the 99th
# percentile (`*.Server.target_latency_percentile = 99`), in milliseconds: (time to first token, time
# per output token). The serving gate's default p99 TTFT and TPOT where a pipeline.yaml entry names
# one of these benchmarks (`mlperf:`): docs/facts/serving.md#mlperf-llm-server-latency.
MLPERF_SERVER_P99_MS: dict[str, tuple[float, float]] = {
    "llama3_1-8b": (2000, 100),
    "llama3_1-8b-interactive": (500, 30),
    "llama2-70b": (2000, 200),
    "llama2-70b-interactive": (450, 40),
    "llama3_1-405b": (6000, 175),
    "llama3_1-405b-interactive": (4500, 80),
}
