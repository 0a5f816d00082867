"""Models served on an EKS cluster: KEDA and LeaderWorkerSet from their pinned charts, and per model a
server (vLLM's OpenAI-compatible server), an internal NLB in front of its serving pods, a
PodDisruptionBudget and, where it scales, a KEDA ScaledObject on the servers' requests in flight in AMP
(docs/serving.md).

- A replica that fits one node is a Deployment's pod; one that spans nodes is a LeaderWorkerSet group
  following vLLM's multi-node recipe: the leader serves, the workers run headless, the group shares
  `LWS_*` addresses, and the whole group is recreated when one pod restarts
  (docs/facts/vllm.md#vllm-multinode-mp-recipe, docs/facts/serving.md#lws-pod-labels-env,
  docs/facts/serving.md#lws-restart-startup-policy).
- The Service selects only serving pods (`fminfra.serving.rules.leader_selector`): an NLB through the AWS
  Load Balancer Controller, internal, IP targets, HTTP health checks on the server's health endpoint and a
  listener idle timeout long enough for a silent stream (docs/facts/serving.md#lbc-nlb-service-annotations,
  docs/facts/serving.md#elb-idle-timeout-limits, docs/facts/vllm.md#vllm-health-endpoint).
- KEDA's operator queries AMP with its own credentials (EKS Pod Identity on keda/keda-operator, with
  `aps:QueryMetrics` on this workspace only), through a TriggerAuthentication of provider `aws`
  (docs/facts/serving.md#keda-aws-pod-identity, docs/facts/serving.md#keda-prometheus-scaler,
  docs/facts/serving.md#amp-query-permission).
- Weights from S3 are streamed by the server (`--load-format runai_streamer`) as the model's own service
  account, which EKS Pod Identity gives read access to the model's prefix only
  (docs/facts/vllm.md#vllm-runai-streamer); weights on FSx are read through the namespace's claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.eks.rules import FSX_CLAIM_NAME
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.policy.constructs.acknowledge import acknowledge, literal
from fminfra.serving.rules import (
    HEALTH_PATH,
    KEDA_NAMESPACE,
    LWS_NAMESPACE,
    MASTER_PORT,
    MODEL_LABEL,
    ROLE_LABEL,
    ROLE_SERVER,
    ROLE_WORKER,
    SCALE_DOWN_STABILIZATION_SECONDS,
    SERVER_PORT,
    SERVER_PORT_NAME,
    SHM_MOUNT,
    ZONE_ID_LABEL,
    Shape,
    keda_query,
    leader_selector,
    service_name,
)
from fminfra.storage.rules import FSX_MOUNT

KEDA_CHART = "keda"
KEDA_REPOSITORY = "https://kedacore.github.io/charts"
KEDA_RELEASE = "keda"
KEDA_SERVICE_ACCOUNT = "keda-operator"
LWS_CHART = "lws"
LWS_REPOSITORY = "oci://registry.k8s.io/lws/charts/lws"
LWS_RELEASE = "lws"
CHART_TIMEOUT_MINUTES = 15
# The LWS controller's requests: the chart asks 1 CPU and 1Gi by default, which does not fit a system node
# beside Karpenter's controller (1 CPU each); 100m and 256Mi, which its templates read from `resources`
# (docs/facts/serving.md#chart-lws-values).
LWS_VALUES = {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}
# The TriggerAuthentication every ScaledObject of the namespace names.
TRIGGER_AUTHENTICATION = "fminfra-amp"
LWS_API = "leaderworkerset.x-k8s.io/v1"
KEDA_API = "keda.sh/v1alpha1"
# The load balancer's port; the pods' is SERVER_PORT.
SERVICE_PORT = 80
# How long a server may take to load its weights before Kubernetes restarts it: 10 s x 360 (an hour; a
# 405B model read from S3 or a lazily loaded FSx file can take that long on a first start).
STARTUP_PERIOD_SECONDS = 10
STARTUP_FAILURES = 360
PROBE_TIMEOUT_SECONDS = 10
LB = "service.beta.kubernetes.io/aws-load-balancer-"
READINESS_GATE_LABEL = "elbv2.k8s.aws/pod-readiness-gate-inject"


@dataclass(frozen=True, kw_only=True)
class ServedModelSpec:
    """One model as the cluster runs it.

    name: its objects' name; served_name: the API's and the metrics' model name.
    image: the server image (by digest, or the EFA build's ECR URI).
    model: what the server loads: `s3://bucket/prefix` or a folder under /fsx.
    s3_prefix: the bucket prefix its service account may read (s3 weights), else None.
    shape: nodes per replica and GPUs per pod; efa_interfaces: EFA devices each pod asks for (0: none).
    node_selector, tolerations: the node group's nodes and taints.
    zone_id: the zone ID every pod of a replica runs in (a replica across Karpenter's nodes); None: any.
    surge: a rolling update starts the new replica before it stops an old one (the node group has room for
      it); false: one replica at a time is replaced in place (maxSurge 0), never a new pod that cannot schedule.
    replicas_min, replicas_max: KEDA scales between them (equal: a fixed count, no ScaledObject).
    """

    name: str
    served_name: str
    image: str
    model: str
    s3_prefix: str | None
    shape: Shape
    tensor_parallel: int
    pipeline_parallel: int
    node_selector: Mapping[str, str]
    tolerations: Sequence[Mapping[str, str]] = ()
    efa_interfaces: int = 0
    zone_id: str | None = None
    surge: bool = True
    max_model_len: int | None = None
    replicas_min: int = 1
    replicas_max: int = 1
    requests_per_replica: int = 32
    polling_interval_seconds: int = 30

    @property
    def scales(self) -> bool:
        return self.replicas_max > self.replicas_min


@dataclass(frozen=True, kw_only=True)
class ModelServingProps:
    """Props of `ModelServing`.

    cluster: the EKS cluster (with its kubectl provider and the Pod Identity agent add-on).
    namespace: the servers' namespace (created here).
    region: the cluster's region (the servers' S3 client, KEDA's SigV4).
    models: what is served.
    keda_version, lws_version: the charts' versions.
    stream_idle_timeout_seconds: the NLB listeners' idle timeout.
    workspace: the AMP workspace the scraper writes the servers' metrics to (needed when a model scales).
    bucket_name, bucket: the data bucket (literal name, and the bucket for its key) for S3 weights.
    """

    cluster: eks.Cluster
    namespace: str
    region: str
    models: Sequence[ServedModelSpec]
    keda_version: str
    lws_version: str
    stream_idle_timeout_seconds: int
    workspace: PrometheusWorkspace | None = None
    bucket_name: str | None = None
    bucket: s3.IBucket | None = None


def _meta(name: str, namespace: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {MODEL_LABEL: model, "app.kubernetes.io/managed-by": "fminfra"}, **extra}


def service_account_name(model: str) -> str:
    return f"{model}-server"


def server_args(spec: ServedModelSpec, *, worker: bool = False) -> list[str]:
    """`vllm serve` arguments (the image's entrypoint: docs/facts/vllm.md#vllm-serve-args); across nodes,
    vLLM's multiprocessing recipe over LeaderWorkerSet's addresses (docs/facts/vllm.md#vllm-multinode-mp-recipe)."""
    args = [spec.model, "--served-model-name", spec.served_name, "--port", str(SERVER_PORT)]
    args += ["--tensor-parallel-size", str(spec.tensor_parallel), "--pipeline-parallel-size", str(spec.pipeline_parallel)]
    if spec.s3_prefix is not None:
        args += ["--load-format", "runai_streamer"]
    # FSx weights: vLLM's default strategy, which detects Lustre and prefetches each rank's share of the files
    # into the page cache when the checkpoint fits the node's RAM; "eager" would read every file whole on
    # every rank (docs/facts/vllm.md#vllm-safetensors-load-strategy)
    if spec.max_model_len is not None:
        args += ["--max-model-len", str(spec.max_model_len)]
    if spec.shape.multi_node:
        args += [
            "--distributed-executor-backend", "mp",
            "--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
            "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", str(MASTER_PORT),
        ]  # fmt: skip
    if worker:
        args.append("--headless")
    return args


def _resources(spec: ServedModelSpec) -> dict[str, Any]:
    amounts: dict[str, int] = {"nvidia.com/gpu": spec.shape.gpus_per_pod}
    if spec.efa_interfaces:
        amounts["vpc.amazonaws.com/efa"] = spec.efa_interfaces
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _pod_spec(spec: ServedModelSpec, namespace: str, region: str, *, role: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "server",
        "image": spec.image,
        "args": server_args(spec, worker=role == ROLE_WORKER),
        # no usage statistics sent to vLLM's server (on by default: docs/facts/vllm.md#vllm-usage-stats)
        "env": [
            {"name": "AWS_REGION", "value": region},
            {"name": "AWS_DEFAULT_REGION", "value": region},
            {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        ],
        "resources": _resources(spec),
        "volumeMounts": [{"name": "shm", "mountPath": SHM_MOUNT}],
    }
    if role == ROLE_SERVER:
        # a busy server's event loop answers /health late: not Kubernetes' 1 s default timeout, which would pull the
        # busiest replica from the load balancer and restart it (its weights reload)
        probe = {
            "httpGet": {"path": HEALTH_PATH, "port": SERVER_PORT_NAME},
            "periodSeconds": STARTUP_PERIOD_SECONDS,
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
        }
        container["ports"] = [{"name": SERVER_PORT_NAME, "containerPort": SERVER_PORT, "protocol": "TCP"}]
        container["startupProbe"] = {**probe, "failureThreshold": STARTUP_FAILURES}
        container["readinessProbe"] = {**probe, "failureThreshold": 3}
        container["livenessProbe"] = {**probe, "failureThreshold": 6}
    volumes: list[dict[str, Any]] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    if spec.model.startswith(FSX_MOUNT):
        container["volumeMounts"].append({"name": "fsx", "mountPath": FSX_MOUNT, "readOnly": True})
        volumes.append({"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME, "readOnly": True}})
    selector = dict(spec.node_selector)
    if spec.zone_id is not None:
        selector[ZONE_ID_LABEL] = spec.zone_id
    pod: dict[str, Any] = {
        "serviceAccountName": service_account_name(spec.name),
        # no `<SERVICE>_PORT` variables: a Service named like one of vLLM's settings (VLLM_PORT) would break it
        "enableServiceLinks": False,
        "nodeSelector": selector,
        "containers": [container],
        "volumes": volumes,
    }
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    return pod


def _template(spec: ServedModelSpec, namespace: str, region: str, role: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {MODEL_LABEL: spec.name, ROLE_LABEL: role}},
        "spec": _pod_spec(spec, namespace, region, role=role),
    }


def workload(spec: ServedModelSpec, namespace: str, region: str) -> dict[str, Any]:
    """The model's Deployment (one node per replica) or LeaderWorkerSet (a group of nodes per replica).
    Where KEDA scales it, no replica count: each deploy would reset KEDA's."""
    replicas = {} if spec.scales else {"replicas": spec.replicas_min}
    if not spec.shape.multi_node:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(spec.name, namespace, spec.name),
            "spec": {
                **replicas,
                **({} if spec.surge else {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}),
                "selector": {"matchLabels": leader_selector(spec.name)},
                "template": _template(spec, namespace, region, ROLE_SERVER),
            },
        }
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(spec.name, namespace, spec.name),
        "spec": {
            **replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": spec.shape.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _template(spec, namespace, region, ROLE_SERVER),
                "workerTemplate": _template(spec, namespace, region, ROLE_WORKER),
            },
        },
    }


def service(spec: ServedModelSpec, namespace: str, idle_timeout_seconds: int) -> dict[str, Any]:
    """An internal NLB with IP targets on the serving pods, health-checked on the server's endpoint."""
    annotations = {
        f"{LB}type": "external",
        f"{LB}nlb-target-type": "ip",
        f"{LB}scheme": "internal",
        f"{LB}healthcheck-protocol": "http",
        f"{LB}healthcheck-port": "traffic-port",
        f"{LB}healthcheck-path": HEALTH_PATH,
        f"{LB}listener-attributes.TCP-{SERVICE_PORT}": f"tcp.idle_timeout.seconds={idle_timeout_seconds}",
        # the NLB sits in every private subnet, the servers often in one zone: each node forwards to all targets
        f"{LB}attributes": "load_balancing.cross_zone.enabled=true",
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(service_name(spec.name), namespace, spec.name, annotations=annotations),
        "spec": {
            "type": "LoadBalancer",
            "selector": leader_selector(spec.name),
            "ports": [{"name": SERVER_PORT_NAME, "port": SERVICE_PORT, "targetPort": SERVER_PORT_NAME, "protocol": "TCP"}],
        },
    }


def disruption_budget(spec: ServedModelSpec, namespace: str) -> dict[str, Any]:
    """At most one of the model's pods evicted at a time (a node drain, Karpenter's consolidation)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(spec.name, namespace, spec.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {MODEL_LABEL: spec.name}}},
    }


def scaled_object(spec: ServedModelSpec, namespace: str, server_address: str, region: str) -> dict[str, Any]:
    """KEDA's ScaledObject: replicas (LeaderWorkerSet groups, through its scale subresource:
    docs/facts/serving.md#keda-scale-crd) from min to max, aiming at `requests_per_replica` requests in flight each."""
    target = (
        {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": spec.name}
        if spec.shape.multi_node
        else {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name}
    )
    return {
        "apiVersion": KEDA_API,
        "kind": "ScaledObject",
        "metadata": _meta(spec.name, namespace, spec.name),
        "spec": {
            "scaleTargetRef": target,
            "minReplicaCount": spec.replicas_min,
            "maxReplicaCount": spec.replicas_max,
            "pollingInterval": spec.polling_interval_seconds,
            # KEDA's cooldownPeriod applies only to scaling to 0 (never here: min >= 1); from N down the HPA
            # decides, after this window (docs/facts/serving.md#keda-polling-cooldown-defaults)
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILIZATION_SECONDS}}
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": server_address,
                        "query": keda_query(spec.served_name, namespace),
                        "threshold": str(spec.requests_per_replica),
                        "awsRegion": region,
                    },
                    "authenticationRef": {"name": TRIGGER_AUTHENTICATION},
                }
            ],
        },
    }


def model_objects(
    spec: ServedModelSpec, *, namespace: str, region: str, server_address: str | None, idle_timeout: int
) -> list[dict[str, Any]]:
    """Every object of one model: its service account, server, Service, budget and (scaling) ScaledObject."""
    # The Service before the server: the load balancer controller injects its readiness gate only into pods
    # created once a Service selects them (docs/facts/serving.md#lbc-pod-readiness-gate).
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(service_account_name(spec.name), namespace, spec.name)},
        service(spec, namespace, idle_timeout),
        workload(spec, namespace, region),
        disruption_budget(spec, namespace),
    ]
    if spec.scales:
        if server_address is None:
            raise ValidationError(f"model {spec.name!r} scales (replicas max above min) and needs the AMP workspace", path="workspace")
        objects.append(scaled_object(spec, namespace, server_address, region))
    return objects


def namespace_objects(namespace: str, *, scaling: bool) -> list[dict[str, Any]]:
    """The namespace (labelled for the readiness gate) and, where a model scales, the TriggerAuthentication its ScaledObjects name: provider
    `aws` without a role, so KEDA's operator signs AMP queries with its own Pod Identity
    (docs/facts/serving.md#keda-aws-pod-identity)."""
    # Labelled for the load balancer controller's pod readiness gate: a rolling update keeps the old server
    # until the new one is healthy in the NLB's target group (docs/facts/serving.md#lbc-pod-readiness-gate).
    labels = {READINESS_GATE_LABEL: "enabled"}
    objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}]
    if scaling:
        objects.append(
            {
                "apiVersion": KEDA_API,
                "kind": "TriggerAuthentication",
                "metadata": {"name": TRIGGER_AUTHENTICATION, "namespace": namespace},
                "spec": {"podIdentity": {"provider": "aws"}},
            }
        )
    return objects


# The serving gate's reads (`fminfra accept --serving`: `kubectl get service <model>-api -n <namespace>`), as a Role
# of the namespace for the acceptance role's Kubernetes group (fminfra/eks/constructs/accept_access.py).
GATE_ROLE = "fminfra-accept-serving"
GATE_RULES = ({"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},)


def gate_rbac(namespace: str, group: str) -> list[dict[str, Any]]:
    """The Role of GATE_RULES in the serving namespace and its RoleBinding to `group`."""
    rbac = "rbac.authorization.k8s.io"
    return [
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": {"name": GATE_ROLE, "namespace": namespace},
            "rules": [dict(r) for r in GATE_RULES],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": GATE_ROLE, "namespace": namespace},
            "subjects": [{"kind": "Group", "name": group, "apiGroup": rbac}],
            "roleRef": {"kind": "Role", "name": GATE_ROLE, "apiGroup": rbac},
        },
    ]


class ModelServing(Construct):
    """The charts (KEDA where a model scales, LeaderWorkerSet where a replica spans nodes), the namespace,
    and per model its objects and, for S3 weights, its reader role. Attributes: `charts` (release -> chart),
    `namespace` (its manifest), `models` (name -> manifest), `keda_role`."""

    def __init__(self, scope: Construct, construct_id: str, props: ModelServingProps) -> None:
        super().__init__(scope, construct_id)
        if not props.models:
            raise ValidationError("models must list at least one model, got none", path="models")
        cluster = props.cluster
        scaling = any(m.scales for m in props.models)
        self.charts: dict[str, eks.HelmChart] = {}
        self.keda_role: iam.Role | None = None
        if scaling:
            if props.workspace is None:
                raise ValidationError("a model scales (replicas max above min): KEDA needs the AMP workspace", path="workspace")
            self.keda_role = self._keda(props, props.workspace)
        if any(m.shape.multi_node for m in props.models):
            self.charts[LWS_RELEASE] = cluster.add_helm_chart(
                "ChartLws",
                chart=LWS_CHART,
                repository=LWS_REPOSITORY,
                version=props.lws_version,
                namespace=LWS_NAMESPACE,
                release=LWS_RELEASE,
                values=LWS_VALUES,
                create_namespace=True,
                wait=True,  # its webhook must answer before a LeaderWorkerSet is applied
                timeout=cdk.Duration.minutes(CHART_TIMEOUT_MINUTES),
            )
        self.namespace = cluster.add_manifest("ServingNamespace", *namespace_objects(props.namespace, scaling=scaling))
        self.models: dict[str, eks.KubernetesManifest] = {}
        server_address = props.workspace.base_url if props.workspace is not None else None
        for spec in props.models:
            objects = model_objects(
                spec,
                namespace=props.namespace,
                region=props.region,
                server_address=server_address,
                idle_timeout=props.stream_idle_timeout_seconds,
            )
            manifest = cluster.add_manifest(f"Serving-{spec.name}", *objects)
            manifest.node.add_dependency(self.namespace)
            for chart in self.charts.values():
                manifest.node.add_dependency(chart)
            if spec.s3_prefix is not None:
                manifest.node.add_dependency(self._reader(props, spec, spec.s3_prefix))
            self.models[spec.name] = manifest
        for chart in self.charts.values():
            self.namespace.node.add_dependency(chart)

    def _keda(self, props: ModelServingProps, workspace: PrometheusWorkspace) -> iam.Role:
        role = iam.Role(
            self,
            "KedaRole",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description="KEDA operator: queries the servers' queue in AMP (EKS Pod Identity)",
        )
        workspace.grant_query(role)
        association = eks.CfnPodIdentityAssociation(
            self,
            "KedaPodIdentity",
            cluster_name=props.cluster.cluster_name,
            namespace=KEDA_NAMESPACE,
            service_account=KEDA_SERVICE_ACCOUNT,
            role_arn=role.role_arn,
        )
        chart = props.cluster.add_helm_chart(
            "ChartKeda",
            chart=KEDA_CHART,
            repository=KEDA_REPOSITORY,
            version=props.keda_version,
            namespace=KEDA_NAMESPACE,
            release=KEDA_RELEASE,
            create_namespace=True,
            wait=True,  # the ScaledObject CRD and its webhook before the models' objects
            timeout=cdk.Duration.minutes(CHART_TIMEOUT_MINUTES),
        )
        chart.node.add_dependency(association)
        policy = role.node.find_child("DefaultPolicy")
        chart.node.add_dependency(policy)
        self.charts[KEDA_RELEASE] = chart
        return role

    def _reader(self, props: ModelServingProps, spec: ServedModelSpec, prefix: str) -> Construct:
        """The model's service account's role: read its weights' prefix of the data bucket (and its key)."""
        if props.bucket_name is None:
            raise ValidationError(f"model {spec.name!r} reads S3 weights and needs the data bucket", path="bucket_name")
        stack = cdk.Stack.of(self)
        role = iam.Role(
            self,
            f"Reader-{spec.name}",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description=f"Model server {spec.name}: reads its weights (EKS Pod Identity)",
        )
        key = props.bucket.encryption_key if props.bucket is not None else None
        view = s3.Bucket.from_bucket_attributes(self, f"Bucket-{spec.name}", bucket_name=props.bucket_name, encryption_key=key)
        # the objects under the prefix, and the listing of that prefix only (the streamer lists the model's files)
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[view.arn_for_objects(f"{prefix}*")]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"], resources=[view.bucket_arn], conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}}
            )
        )
        if key is not None:
            key.grant_decrypt(role)
        association = eks.CfnPodIdentityAssociation(
            self,
            f"PodIdentity-{spec.name}",
            cluster_name=props.cluster.cluster_name,
            namespace=props.namespace,
            service_account=service_account_name(spec.name),
            role_arn=role.role_arn,
        )
        policy = role.node.find_child("DefaultPolicy")
        reason = f"s3:GetObject under the data bucket's prefix {prefix} only (and its listing): the weights of model {spec.name}"
        acknowledge(policy, f"IAM5[Resource::{literal(stack, view.arn_for_objects(f'{prefix}*'))}]", reason)
        association.node.add_dependency(policy)
        return association
