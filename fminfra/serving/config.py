"""The `serving` section: the models an environment serves on its EKS inference node groups
(docs/serving.md). What needs other sections (the node group, the bucket, the file system, AMP, the
load balancer controller) is checked by the environment (`fminfra.config.environment`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from fminfra.core.config_base import Model, Problems, _raise_problems
from fminfra.core.findings import error
from fminfra.eks.rules import DNS_LABEL, RESERVED_NAMESPACES
from fminfra.serving.rules import (
    CHART_NAMESPACES,
    DEFAULT_NAMESPACE,
    DEFAULT_POLLING_INTERVAL,
    DEFAULT_REQUESTS_PER_REPLICA,
    DEFAULT_STREAM_IDLE_TIMEOUT,
    FSX_PATH,
    IMAGE_BY_DIGEST,
    MODEL_NAME,
    NLB_IDLE_TIMEOUT_MAX,
    NLB_IDLE_TIMEOUT_MIN,
    S3_PREFIX,
    SERVED_NAME,
)


class WeightsConfig(Model):
    """Where a model's weights are: a prefix of the environment's data bucket, streamed from S3 by the
    server (vLLM's Run:ai streamer), or a folder on the environment's FSx for Lustre file system."""

    source: Literal["s3", "fsx"] = Field(description="s3: the data bucket (streamed by the server); fsx: the file system, under /fsx.")
    path: str = Field(description="s3: a key prefix ending in / (models/llama-3-1-8b/); fsx: a folder under /fsx (/fsx/models/llama).")

    @model_validator(mode="after")
    def _path(self) -> WeightsConfig:
        rule = S3_PREFIX if self.source == "s3" else FSX_PATH
        if problem := rule.problem(self.path):
            raise Problems([error("path", problem)])
        return self


class ReplicasConfig(Model):
    """How many replicas (a replica: one server, on one node or across a LeaderWorkerSet group)."""

    min: int = Field(
        default=1, ge=1, le=1000, description="At least 1: scaling from zero waits for AMP's scrape and poll and a GPU node's start."
    )
    max: int = Field(default=1, ge=1, le=1000, description="More than min: KEDA scales between them on the requests in flight.")

    @field_validator("min", mode="before")
    @classmethod
    def _not_zero(cls, value: object) -> object:
        if value == 0 and not isinstance(value, bool):
            raise ValueError(
                "must be at least 1, got 0: a replica at 0 would never wake in time (AMP's scrape and KEDA's poll, then a GPU "
                "node's start and the weights' load: docs/serving.md#scaling)"
            )
        return value

    @model_validator(mode="after")
    def _order(self) -> ReplicasConfig:
        if self.max < self.min:
            raise Problems([error("max", f"must be at least min ({self.min}), got {self.max}")])
        return self


class ScalingConfig(Model):
    """KEDA's Prometheus trigger on the servers' requests in flight (docs/serving.md#scaling)."""

    requests_per_replica: int = Field(
        default=DEFAULT_REQUESTS_PER_REPLICA,
        ge=1,
        le=100000,
        description="Requests in flight (running and waiting) per replica KEDA aims at: the concurrency one replica serves well.",
    )
    polling_interval_seconds: int = Field(default=DEFAULT_POLLING_INTERVAL, ge=5, le=3600, description="How often KEDA queries AMP.")


class ServedModelConfig(Model):
    """One served model."""

    name: str = Field(description=f"The objects' name: {MODEL_NAME.allows}; unique.")
    served_name: str | None = Field(default=None, description="The OpenAI API's model name (--served-model-name). Default: name.")
    weights: WeightsConfig
    node_group: str = Field(description="The compute.inference_node_groups entry whose nodes run it.")
    tensor_parallel: int = Field(default=1, ge=1, le=64, description="GPUs per pipeline stage (--tensor-parallel-size); divides the heads.")
    pipeline_parallel: int = Field(default=1, ge=1, le=64, description="Pipeline stages (--pipeline-parallel-size): across nodes.")
    attention_heads: int = Field(ge=1, le=4096, description="The model's attention heads (its config.json: num_attention_heads).")
    hidden_layers: int | None = Field(
        default=None, ge=1, le=4096, description="The model's layers (num_hidden_layers); needed with pipeline_parallel > 1."
    )
    max_model_len: int | None = Field(default=None, ge=16, le=10_000_000, description="--max-model-len. Default: the model's own.")
    replicas: ReplicasConfig = Field(default_factory=ReplicasConfig)
    scaling: ScalingConfig = Field(default_factory=ScalingConfig)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if problem := MODEL_NAME.problem(value):
            raise ValueError(problem)
        return value

    @field_validator("served_name")
    @classmethod
    def _served_name(cls, value: str | None) -> str | None:
        if value is not None and (problem := SERVED_NAME.problem(value)):
            raise ValueError(problem)
        return value

    @property
    def api_name(self) -> str:
        """The name clients ask for and the metrics' model_name."""
        return self.served_name or self.name


class ServingConfig(Model):
    """Models served on the EKS cluster (docs/serving.md)."""

    namespace: str = Field(default=DEFAULT_NAMESPACE, description="The namespace of the servers; a DNS label, not a system one.")
    image: str | None = Field(
        default=None,
        description="The server image by digest. Default: the pinned vLLM image, and fminfra's EFA build of it for multi-node replicas on EFA types.",
    )
    stream_idle_timeout_seconds: int = Field(
        default=DEFAULT_STREAM_IDLE_TIMEOUT,
        ge=NLB_IDLE_TIMEOUT_MIN,
        le=NLB_IDLE_TIMEOUT_MAX,
        description="The load balancer's idle timeout: how long a streamed answer may be silent.",
    )
    models: list[ServedModelConfig] = Field(min_length=1, description="At least one model.")
    gate_access: bool = Field(
        default=False,
        description="true: the acceptance role fminfra-ENV-accept (the GitHub OIDC stack's; deploy that first) may read the "
        "namespace's Services, so `accept --serving` finds the endpoints (docs/serving.md#the-serving-gate).",
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if problem := DNS_LABEL.problem(value):
            raise ValueError(problem)
        taken = (*RESERVED_NAMESPACES, *CHART_NAMESPACES)
        if value in taken:
            raise ValueError(f"must not be a namespace fminfra, its charts or Kubernetes run in ({', '.join(taken)}), got {value!r}")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None and (problem := IMAGE_BY_DIGEST.problem(value)):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _unique(self) -> ServingConfig:
        problems = []
        seen: dict[str, int] = {}
        served: dict[str, int] = {}
        for i, model in enumerate(self.models):
            if model.name in seen:
                problems.append(error(f"models[{i}].name", f"{model.name!r} is also models[{seen[model.name]}]'s name; names are unique"))
            seen.setdefault(model.name, i)
            if model.api_name in served:
                problems.append(
                    error(f"models[{i}].served_name", f"{model.api_name!r} is also models[{served[model.api_name]}]'s served name; unique")
                )
            served.setdefault(model.api_name, i)
        _raise_problems(problems)
        return self
