"""`pipeline.yaml`: the promotion pipeline that spans the environments (it is not in config/,
since it names several of them). Read by `load_pipeline`; the stack is `fminfra.app.pipeline`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from fminfra.config.environment import EnvironmentConfig
from fminfra.config.loader import load_config, read_yaml
from fminfra.core.config_base import check_account, check_region
from fminfra.core.errors import ConfigError
from fminfra.promotion.rules import CONNECTION_ARN_RULE, CONNECTION_REPOSITORY_RULE, DOCKER_HUB_SECRET_ARN_RULE, accept_folder_problem
from fminfra.serving.rules import MLPERF_SERVER_P99_MS

DEFAULT_PIPELINE_FILE = Path("pipeline.yaml")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceConfig(_Model):
    """Where the pipeline gets the code: a CodeConnections (GitHub, GitLab, Bitbucket) repository."""

    connection_arn: str = Field(description="arn:aws:codeconnections:REGION:ACCOUNT:connection/UUID (created in the console).")
    repository: str = Field(description="owner/name of the repository.")
    branch: str = Field(default="main", min_length=1, description="Branch whose pushes run the pipeline.")

    @field_validator("connection_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        if not CONNECTION_ARN_RULE.match(value):
            raise ValueError(f"must be arn:aws:codeconnections:REGION:ACCOUNT:connection/UUID, got {value!r}")
        return value

    @field_validator("repository")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not CONNECTION_REPOSITORY_RULE.match(value):
            raise ValueError(f"must be owner/name, got {value!r}")
        return value


class ServingThresholds(_Model):
    """`fminfra accept ENV --serving`: one load point of one served model (its lengths and
    concurrency) and what it must meet there. Latency figures are the 99th percentile over the
    point's requests, as vLLM's benchmark computes them (docs/facts/vllm.md#vllm-bench-metric-definitions).
    A figure left unset fails the gate, named, unless `mlperf:` supplies it (TTFT and TPOT only) or it
    is optional (itl_p99_ms). See docs/serving.md, "The serving gate"."""

    model: str = Field(description="serving.models[].name of the environment's config.")
    instance_type: str | None = Field(
        default=None, description="The GPU type these figures are for; must be the model's node group type. Default: whatever it runs on."
    )
    input_tokens: int = Field(ge=1, le=1_000_000, description="Prompt length in tokens (sent as token ids).")
    output_tokens: int = Field(ge=1, le=100_000, description="Tokens asked per request (max_tokens, with ignore_eos).")
    concurrency: int = Field(ge=1, le=4096, description="Requests in flight at once.")
    requests: int = Field(ge=1, le=100_000, description="Requests sent in all; at least concurrency.")
    mlperf: Literal[tuple(MLPERF_SERVER_P99_MS)] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="An MLPerf Inference LLM benchmark whose Server-scenario p99 TTFT and TPOT constraints stand in for "
        "ttft_p99_ms and tpot_p99_ms when unset (docs/facts/serving.md#mlperf-llm-server-latency).",
    )
    ttft_p99_ms: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="p99 time to first token above which it fails (ms)."
    )
    tpot_p99_ms: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="p99 time per output token above which it fails (ms)."
    )
    itl_p99_ms: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="p99 inter-token latency above which it fails (ms); unset: reported only."
    )
    min_output_tokens_per_s: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Output tokens per second over the point below which it fails."
    )
    max_error_rate: float = Field(
        default=0.0, ge=0, le=1, allow_inf_nan=False, description="Failed requests / requests above which it fails."
    )

    @model_validator(mode="after")
    def _enough_requests(self) -> ServingThresholds:
        if self.requests < self.concurrency:
            raise ValueError(f"requests ({self.requests}) must be at least concurrency ({self.concurrency})")
        return self


class AcceptThresholds(_Model):
    """`fminfra accept` for one environment: thresholds that replace (or stand in for) the per-type
    ones of scripts/node/instance_types.tsv. A type without a sourced threshold fails the gate
    unless nccl_fail_gbps is set here. `gate`: whether the promotion pipelines run `fminfra accept`
    after this environment deploys and before the next is promoted. See docs/first-job.md and
    docs/promotion.md."""

    gate: bool | None = Field(
        default=None,
        description="Run the acceptance jobs after this environment deploys, before the next is promoted; default: on when the environment has training GPUs.",
    )
    nccl_fail_gbps: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="all_reduce busbw at 1-2 GiB on two nodes below which accept fails (GB/s)."
    )
    nccl_warn_gbps: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="busbw below which accept warns (GB/s); default: nccl_fail_gbps."
    )
    serving_gate: bool | None = Field(
        default=None,
        description="Run `fminfra accept --serving` after this environment deploys, before the next is promoted; default: on with a serving: section.",
    )
    serving: list[ServingThresholds] = Field(
        default_factory=list, description="The serving gate's load points and thresholds, by served model (docs/serving.md)."
    )
    runs_on: list[str] | None = Field(
        default=None,
        min_length=1,
        description="GitHub workflow: the labels of the runner the gate runs on (its own job), e.g. [self-hosted, fminfra-staging]; "
        "required where the gate needs the cluster's private endpoint (HyperPod EKS without compute.eks.public_access_cidrs): "
        'a runner in the environment\'s VPC (docs/promotion.md, "The acceptance gate").',
    )

    @field_validator("runs_on")
    @classmethod
    def _labels(cls, value: list[str] | None) -> list[str] | None:
        bad = [label for label in value or [] if not isinstance(label, str) or not label.strip()]
        if bad:
            raise ValueError(f"runner labels must be non-empty strings, got {bad!r}")
        return value

    @model_validator(mode="after")
    def _order(self) -> AcceptThresholds:
        if self.nccl_warn_gbps is not None and self.nccl_fail_gbps is None:
            raise ValueError("nccl_warn_gbps needs nccl_fail_gbps")
        if self.nccl_warn_gbps is not None and self.nccl_fail_gbps is not None and self.nccl_warn_gbps < self.nccl_fail_gbps:
            raise ValueError(f"nccl_warn_gbps ({self.nccl_warn_gbps}) must not be below nccl_fail_gbps ({self.nccl_fail_gbps})")
        return self


class PipelineEnvironment(_Model):
    """One environment the pipeline deploys, in order."""

    config: str = Field(description="Path of the environment's config file, relative to the folder of pipeline.yaml (the repository root).")
    approval: bool = Field(
        default=False,
        description="true: a manual approval after this environment's checks and before its deploy; on GitHub, required reviewers on its environment.",
    )
    accept: AcceptThresholds = Field(default_factory=AcceptThresholds, description="`fminfra accept` thresholds for this environment.")


class PipelineConfig(_Model):
    """pipeline.yaml: the promotion pipeline that spans the environments."""

    version: int = Field(default=1, ge=1, le=1, description="Format version.")
    name: str = Field(default="fminfra", pattern=r"^[a-z][a-z0-9-]{0,31}$", description="Pipeline name (and stack name prefix).")
    account: str = Field(description="12-digit tooling account the pipeline runs in (quoted).")
    region: str = Field(description="Region of the pipeline.")
    source: SourceConfig
    environments: list[PipelineEnvironment] = Field(min_length=1, description="Deployed in this order.")
    docker_hub_secret_arn: str | None = Field(
        default=None,
        description="Complete ARN of a Secrets Manager secret {username, secret} in the pipeline's account and region: "
        "CodeBuild logs in to Docker Hub with it before it builds container assets (the serving EFA image's base is there).",
    )

    _account = field_validator("account", mode="before")(check_account)

    @field_validator("docker_hub_secret_arn")
    @classmethod
    def _docker_hub_secret(cls, value: str | None) -> str | None:
        if value is not None and not DOCKER_HUB_SECRET_ARN_RULE.match(value):
            raise ValueError(
                "must be a Secrets Manager secret's complete ARN, arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-XXXXXX "
                f"(aws secretsmanager describe-secret --secret-id NAME --query ARN), got {value!r}"
            )
        return value

    _region = field_validator("region")(check_region)

    @model_validator(mode="after")
    def _connection_in_the_pipeline_account(self) -> PipelineConfig:
        # The source action uses the connection from the pipeline's own account and region.
        arn = CONNECTION_ARN_RULE.match(self.source.connection_arn)
        if arn and (arn["account"], arn["region"]) != (self.account, self.region):
            raise ValueError(
                f"source.connection_arn is in {arn['account']}, {arn['region']}; the pipeline runs in "
                f"{self.account}, {self.region}: create the connection there (connections are regional resources of one account)"
            )
        secret = DOCKER_HUB_SECRET_ARN_RULE.match(self.docker_hub_secret_arn or "")
        if secret and (secret["account"], secret["region"]) != (self.account, self.region):
            raise ValueError(
                f"docker_hub_secret_arn is in {secret['account']}, {secret['region']}; the pipeline's CodeBuild projects read it in "
                f"{self.account}, {self.region}: create the secret there"
            )
        return self

    @field_validator("environments")
    @classmethod
    def _unique_configs(cls, value: list[PipelineEnvironment]) -> list[PipelineEnvironment]:
        seen = [e.config for e in value]
        repeated = sorted({c for c in seen if seen.count(c) > 1})
        if repeated:
            raise ValueError(f"each config once, repeated: {', '.join(repeated)}")
        return value


def has_training_gpus(cfg: EnvironmentConfig) -> bool:
    """Training groups with nodes and GPUs: what the acceptance jobs need to run."""
    return any(group.count > 0 and group.spec.gpus > 0 for group in cfg.compute.instance_groups)


ACCEPTED_ORCHESTRATORS = ("slurm", "eks")  # what `fminfra accept` reaches (ec2 Auto Scaling groups: not yet)


def gate_enabled(env: PipelineEnvironment, cfg: EnvironmentConfig) -> bool:
    """The acceptance gate of one environment: `accept.gate` if set, else on with training GPUs on a
    cluster `fminfra accept` reaches (HyperPod Slurm or EKS)."""
    if env.accept.gate is not None:
        return env.accept.gate
    return has_training_gpus(cfg) and cfg.compute.orchestrator in ACCEPTED_ORCHESTRATORS


def serving_gate_enabled(env: PipelineEnvironment, cfg: EnvironmentConfig) -> bool:
    """The serving gate of one environment: `accept.serving_gate` if set, else on with a serving: section."""
    if env.accept.serving_gate is not None:
        return env.accept.serving_gate
    return cfg.serving is not None


def serving_problems(where: str, env: PipelineEnvironment, cfg: EnvironmentConfig) -> list[str]:
    """accept.serving_gate and accept.serving against the environment's served models and their GPU types."""
    if cfg.serving is None:
        out = [f"{where}.serving_gate: true, but {env.config} has no serving: section"] if env.accept.serving_gate else []
        if env.accept.serving:
            out.append(f"{where}.serving: thresholds given, but {env.config} has no serving: section (no served models)")
        return out
    models = {m.name: m for m in cfg.serving.models}
    types = {g.name: g.instance_type for g in cfg.compute.inference_node_groups}
    out = []
    for i, point in enumerate(env.accept.serving):
        served = models.get(point.model)
        if served is None:
            out.append(f"{where}.serving[{i}].model: {point.model!r} is not served by {env.config} (allowed: {', '.join(models)})")
        elif point.instance_type is not None and point.instance_type != types.get(served.node_group):
            out.append(
                f"{where}.serving[{i}].instance_type: {point.instance_type!r}, but {point.model} runs on node group {served.node_group}"
                f" ({types.get(served.node_group)}); allowed: {types.get(served.node_group)} or leave it out"
            )
        if served is not None and served.max_model_len is not None and point.input_tokens + point.output_tokens > served.max_model_len:
            # vLLM refuses a request longer than the model's context: every request of the point would be a 400
            out.append(
                f"{where}.serving[{i}].input_tokens: {point.input_tokens} + output_tokens {point.output_tokens} exceed {point.model}'s"
                f" max_model_len ({served.max_model_len}) in {env.config}; allowed: at most {served.max_model_len} together"
            )
    return out


def needs_private_endpoint(env: PipelineEnvironment, cfg: EnvironmentConfig) -> bool:
    """A gate that talks to a private-only EKS API server: HyperPod EKS without public_access_cidrs.
    Such an endpoint answers only from the cluster's VPC or a connected network, and only where the
    cluster security group allows 443 from there (docs/facts/eks.md#eks-private-endpoint-reach): not
    from a GitHub-hosted runner, nor from the pipeline's CodeBuild in the tooling account."""
    eks = cfg.compute.eks
    return gate_enabled(env, cfg) and cfg.compute.orchestrator == "eks" and eks is not None and not eks.public_access_cidrs


def _format_errors(file: str, exc: PydanticValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[") or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (see fminfra.config.pipeline.PipelineConfig for the allowed fields)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        lines.append(f"{file}: {where}: {msg}")
    return lines


def load_pipeline(path: Path) -> tuple[PipelineConfig, list[EnvironmentConfig]]:
    """pipeline.yaml and the environment configs it names; ConfigError with one line per problem."""
    file = str(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([f"{file}: (top level): must be a mapping, got {type(data).__name__}"])
    try:
        pipeline = PipelineConfig.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(_format_errors(file, exc)) from None
    root = path.parent
    configs: list[EnvironmentConfig] = []
    problems: list[str] = []
    for i, env in enumerate(pipeline.environments):
        config_path = root / env.config
        if not config_path.is_file():
            problems.append(
                f"{file}: environments[{i}].config: no such file {env.config!r} (paths are relative to the folder of {path.name}, {root})"
            )
            continue
        try:
            configs.append(load_config(config_path))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if not problems:
        for i, (env, cfg) in enumerate(zip(pipeline.environments, configs, strict=True)):
            if env.accept.gate and not has_training_gpus(cfg):
                problems.append(
                    f"{file}: environments[{i}].accept.gate: true, but {env.config} has no training group with GPUs and nodes:"
                    " the acceptance jobs need GPUs; set gate: false or leave it out"
                )
            if env.accept.gate and cfg.compute.orchestrator not in ACCEPTED_ORCHESTRATORS and has_training_gpus(cfg):
                problems.append(
                    f"{file}: environments[{i}].accept.gate: true, but {env.config} uses orchestrator {cfg.compute.orchestrator}, which"
                    f" `fminfra accept` does not reach (allowed: {', '.join(ACCEPTED_ORCHESTRATORS)}); set gate: false or leave it out"
                )
            lustre = cfg.storage.lustre if cfg.storage is not None else None
            folder = accept_folder_problem(cfg.compute.orchestrator, lustre is not None)
            if gate_enabled(env, cfg) and has_training_gpus(cfg) and folder is not None:
                problems.append(f"{file}: environments[{i}].accept.gate: the gate is on, but {env.config}: {folder}")
            eks = cfg.compute.eks
            if gate_enabled(env, cfg) and cfg.compute.orchestrator == "eks" and eks is not None and not eks.accept_access:
                problems.append(
                    f"{file}: environments[{i}].accept: the gate is on, but {env.config} leaves compute.eks.accept_access off:"
                    " the acceptance role would have no Kubernetes access to the cluster; set it to true, or accept: {gate: false}"
                )
            if needs_private_endpoint(env, cfg) and env.accept.runs_on is None:
                problems.append(
                    f"{file}: environments[{i}].accept.runs_on: required: the gate is on and {env.config} has a private-only EKS endpoint"
                    " (compute.eks.public_access_cidrs: []), which GitHub-hosted runners cannot reach; give the labels of a runner in its VPC,"
                    " e.g. [self-hosted, fminfra-" + cfg.name + "], or accept: {gate: false}"
                )
            problems.extend(serving_problems(f"{file}: environments[{i}].accept", env, cfg))
            if serving_gate_enabled(env, cfg) and cfg.serving is not None and env.accept.runs_on is None:
                problems.append(
                    f"{file}: environments[{i}].accept.runs_on: required: the serving gate is on and {env.config}'s models answer on"
                    " internal load balancers, which GitHub-hosted runners cannot reach; give the labels of a runner in its VPC,"
                    " e.g. [self-hosted, fminfra-" + cfg.name + "], or accept: {serving_gate: false}"
                )
            if serving_gate_enabled(env, cfg) and cfg.serving is not None and not cfg.serving_gate_access:
                problems.append(
                    f"{file}: environments[{i}].accept.serving_gate: on, but {env.config} gives the acceptance role no Kubernetes access to"
                    " read its Services: set serving.gate_access: true there (after the GitHub OIDC stack, which creates the role"
                    " fminfra-" + cfg.name + "-accept, is deployed), or accept: {serving_gate: false}"
                )
            if env.accept.runs_on is not None and not gate_enabled(env, cfg) and not serving_gate_enabled(env, cfg):
                problems.append(
                    f"{file}: environments[{i}].accept.runs_on: set, but the gate is off for {env.config}: remove it or turn the gate on"
                )
    names = [c.name for c in configs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"{file}: environments: environment names must be unique, repeated: {', '.join(repeated)}")
    if problems:
        raise ConfigError(problems)
    return pipeline, configs
