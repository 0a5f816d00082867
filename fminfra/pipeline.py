"""Promotion pipeline: one CDK Pipelines stack that deploys the environments in order.

Configured by `pipeline.yaml` at the repository root (it spans environments, so it is not in
config/). Source: a CodeConnections repository. A synth step runs `make test` and synthesizes
this app with `-c pipeline=pipeline.yaml`; then one wave per environment, in the file's order,
each deploying `EnvironmentStage` with that environment's config. Before each deploy, a check
step runs `python -m fminfra preflight` and `python -m fminfra guard --deployed` against the
target account; a failing command fails the step and stops the pipeline there. An environment
with `approval: true` gets a manual approval before its checks and deploy.

Cross-account: the pipeline lives in its own (tooling) account; each target account is
bootstrapped with `cdk bootstrap --trust TOOLING_ACCOUNT --cloudformation-execution-policies ...`,
and the pipeline's actions assume the target's CDK roles (see README, "Promoting changes").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import pipelines
from constructs import Construct
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from fminfra.config import EnvironmentConfig, check_account, check_region, load_config
from fminfra.constructs.acknowledge import acknowledge
from fminfra.errors import ConfigError
from fminfra.stage import EnvironmentStage

DEFAULT_PIPELINE_FILE = Path("pipeline.yaml")
CONNECTION_ARN_RULE = re.compile(r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z0-9-]+:[0-9]{12}:connection/[0-9a-f-]{36}$")
REPOSITORY_RULE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# The bootstrap qualifier every target account uses (CDK's default).
BOOTSTRAP_QUALIFIER = "hnb659fds"


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
        if not REPOSITORY_RULE.match(value):
            raise ValueError(f"must be owner/name, got {value!r}")
        return value


class PipelineEnvironment(_Model):
    """One environment the pipeline deploys, in order."""

    config: str = Field(description="Path of the environment's config file, relative to the repository root.")
    approval: bool = Field(default=False, description="true: a manual approval before this environment's checks and deploy.")


class PipelineConfig(_Model):
    """pipeline.yaml: the promotion pipeline that spans the environments."""

    version: int = Field(default=1, ge=1, le=1, description="Format version.")
    name: str = Field(default="fminfra", pattern=r"^[a-z][a-z0-9-]{0,31}$", description="Pipeline name (and stack name prefix).")
    account: str = Field(description="12-digit tooling account the pipeline runs in (quoted).")
    region: str = Field(description="Region of the pipeline.")
    source: SourceConfig
    environments: list[PipelineEnvironment] = Field(min_length=1, description="Deployed in this order.")

    _account = field_validator("account", mode="before")(check_account)
    _region = field_validator("region")(check_region)

    @field_validator("environments")
    @classmethod
    def _unique_configs(cls, value: list[PipelineEnvironment]) -> list[PipelineEnvironment]:
        seen = [e.config for e in value]
        repeated = sorted({c for c in seen if seen.count(c) > 1})
        if repeated:
            raise ValueError(f"each config once, repeated: {', '.join(repeated)}")
        return value


def _format_errors(file: str, exc: PydanticValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[") or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (see fminfra.pipeline.PipelineConfig for the allowed fields)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        lines.append(f"{file}: {where}: {msg}")
    return lines


def load_pipeline(path: Path) -> tuple[PipelineConfig, list[EnvironmentConfig]]:
    """pipeline.yaml and the environment configs it names; ConfigError with one line per problem."""
    file = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([f"{file}: (file): no such file"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{file}: (yaml): invalid YAML: {getattr(exc, 'problem', None) or exc}"]) from None
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
            problems.append(f"{file}: environments[{i}].config: no such file {env.config!r}")
            continue
        try:
            configs.append(load_config(config_path))
        except ConfigError as exc:
            problems.extend(exc.problems)
    names = [c.name for c in configs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"{file}: environments: environment names must be unique, repeated: {', '.join(repeated)}")
    if problems:
        raise ConfigError(problems)
    return pipeline, configs


def bootstrap_role_arn(cfg: EnvironmentConfig, role: str) -> str:
    """ARN of a CDK bootstrap role (deploy, lookup, ...) in an environment's account and region."""
    return f"arn:aws:iam::{cfg.account}:role/cdk-{BOOTSTRAP_QUALIFIER}-{role}-role-{cfg.account}-{cfg.region}"


# Runs the checks with the target account's CDK lookup role (ReadOnlyAccess, trusted by
# `cdk bootstrap --trust`): a profile that assumes it from CodeBuild's container credentials
# (botocore's `credential_source = EcsContainer`), so preflight and guard need no role option.
_ASSUME_ROLE_PROFILE = [
    'printf "[profile target]\\nrole_arn = %s\\ncredential_source = EcsContainer\\nregion = %s\\n" "$TARGET_ROLE_ARN" "$TARGET_REGION" > "$CODEBUILD_SRC_DIR/.aws-target-config"',
    'export AWS_CONFIG_FILE="$CODEBUILD_SRC_DIR/.aws-target-config" AWS_PROFILE=target',
]


class PipelineStack(cdk.Stack):
    """A CDK Pipelines CodePipeline: synth (`make test`), then one wave per environment.

    Attributes: `pipeline` (the `pipelines.CodePipeline`), `stages` (EnvironmentStage by name),
    `waves` (by environment name), `check_steps` (the preflight+guard step of each environment).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline_config: PipelineConfig,
        environments: list[EnvironmentConfig],
        pipeline_file: str = "pipeline.yaml",
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=cdk.Environment(account=pipeline_config.account, region=pipeline_config.region), **kwargs)
        pc = pipeline_config
        source = pipelines.CodePipelineSource.connection(pc.source.repository, pc.source.branch, connection_arn=pc.source.connection_arn)
        build_environment = codebuild.BuildEnvironment(
            build_image=codebuild.LinuxBuildImage.STANDARD_7_0, compute_type=codebuild.ComputeType.LARGE
        )
        synth = pipelines.ShellStep(
            "Synth",
            input=source,
            commands=[
                "make test",
                f"npx --no-install cdk synth --quiet --no-notices -c pipeline={pipeline_file}",
            ],
            primary_output_directory="cdk.out",
        )
        synth_output = synth.primary_output
        assert synth_output is not None  # primary_output_directory is set above
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=f"{pc.name}-promotion",
            synth=synth,
            cross_account_keys=True,
            enable_key_rotation=True,
            code_build_defaults=pipelines.CodeBuildOptions(build_environment=build_environment),
        )
        self.stages: dict[str, EnvironmentStage] = {}
        self.waves: dict[str, pipelines.Wave] = {}
        self.check_steps: dict[str, pipelines.CodeBuildStep] = {}
        self.approval_steps: dict[str, pipelines.ManualApprovalStep] = {}
        for env, cfg in zip(pc.environments, environments, strict=True):
            check = pipelines.CodeBuildStep(
                f"Check-{cfg.name}",
                input=source,
                additional_inputs={"cdk.out": synth_output},
                env={"TARGET_ROLE_ARN": bootstrap_role_arn(cfg, "lookup"), "TARGET_REGION": cfg.region},
                commands=[
                    "make setup",
                    *_ASSUME_ROLE_PROFILE,
                    f".venv/bin/python -m fminfra preflight {env.config}",
                    f".venv/bin/python -m fminfra guard {env.config} --templates cdk.out --deployed",
                ],
                role_policy_statements=[
                    iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[bootstrap_role_arn(cfg, "lookup")]),
                ],
            )
            pre: list[pipelines.Step] = [check]
            if env.approval:
                approval = pipelines.ManualApprovalStep(
                    f"Approve-{cfg.name}", comment=f"Promote to {cfg.name} ({cfg.account}, {cfg.region})? Review the staging deploy first."
                )
                check.add_step_dependency(approval)
                pre.insert(0, approval)
                self.approval_steps[cfg.name] = approval
            wave = self.pipeline.add_wave(cfg.name, pre=pre)
            # Beside the pipeline stack, not inside it: construct paths (and so the logical ids
            # derived from them) are the same as in the standalone app, so moving an environment
            # onto the pipeline changes none of its templates.
            stage = EnvironmentStage(scope, cfg)
            wave.add_stage(stage)
            self.waves[cfg.name] = wave
            self.stages[cfg.name] = stage
            self.check_steps[cfg.name] = check
        # Build now (CDK Pipelines would build just before synth) so that the generated
        # resources exist to be acknowledged below.
        self.pipeline.build_pipeline()
        self._acknowledge_generated_grants()

    def _acknowledge_generated_grants(self) -> None:
        """cdk-nag findings on what CDK Pipelines generates, each acknowledged with its reason."""
        scope = self.pipeline.node
        for action in (
            "kms:GenerateDataKey*",
            "kms:ReEncrypt*",
            "s3:Abort*",
            "s3:DeleteObject*",
            "s3:GetBucket*",
            "s3:GetObject*",
            "s3:List*",
        ):
            acknowledge(
                self.pipeline,
                f"IAM5[Action::{action}]",
                "CDK Pipelines' grant on its own artifact bucket and key: object-level actions scoped to that bucket and key",
            )
        bucket = self.pipeline.pipeline.artifact_bucket.node.default_child
        bucket_id = self.get_logical_id(bucket)  # type: ignore[arg-type]
        acknowledge(
            self.pipeline,
            f"IAM5[Resource::<{bucket_id}.Arn>/*]",
            "artifact objects have generated keys: the pipeline roles read and write any object of the pipeline's own artifact bucket",
        )
        acknowledge(
            self.pipeline,
            "S1",
            "the artifact bucket holds only build artifacts, KMS-encrypted and reachable by the pipeline roles alone; CloudTrail audits access",
        )
        acknowledge(
            self.pipeline,
            "IAM5[Resource::*]",
            "CDK Pipelines: cross-region replication keys are addressed by alias, and self-mutation must describe any stack it deploys",
        )
        acknowledge(
            self.pipeline,
            f"IAM5[Resource::arn:*:iam::{self.account}:role/*]",
            "self-mutation assumes the CDK bootstrap roles only: the statement is conditioned on the aws-cdk:bootstrap-role tag",
        )
        for child in scope.find_all():
            if isinstance(child, codebuild.CfnProject):
                project_id = self.get_logical_id(child)
                for resource in (
                    f"arn:aws:codebuild:{self.region}:{self.account}:report-group/<{project_id}>-*",
                    f"arn:aws:logs:{self.region}:{self.account}:log-group:/aws/codebuild/<{project_id}>:*",
                ):
                    acknowledge(
                        self.pipeline,
                        f"IAM5[Resource::{resource}]",
                        "CodeBuild's generated grant on its own project's log streams and report groups, named after the project",
                    )
        # Asset publishing (node and lifecycle scripts are file assets) runs in CodeBuild projects
        # that CDK Pipelines generates per asset; their shared role writes logs and reports of
        # projects whose names are not known when the role is defined.
        for resource in (
            f"arn:aws:logs:{self.region}:{self.account}:log-group:/aws/codebuild/*",
            f"arn:aws:codebuild:{self.region}:{self.account}:report-group/*",
        ):
            acknowledge(
                self.pipeline,
                f"IAM5[Resource::{resource}]",
                "CDK Pipelines' asset-publishing role: logs and reports of its generated per-asset CodeBuild projects, in this account and region only",
            )
        for support in self.pipeline.pipeline.cross_region_support.values():
            replication = support.replication_bucket
            acknowledge(
                replication,
                "S1",
                "CDK Pipelines' cross-region replication bucket holds only KMS-encrypted artifacts for the pipeline roles",
            )
            # Resolved here, in the pipeline stack, a cross-region bucket's name is its generated physical name.
            acknowledge(
                self.pipeline,
                f"IAM5[Resource::arn:aws:s3:::{self.resolve(replication.bucket_name)}/*]",
                "artifact objects have generated keys: the pipeline role writes any object of its replication bucket",
            )


def build_pipeline_app(app: cdk.App, path: Path) -> PipelineStack:
    """The pipeline stack (with every environment's Stage inside) and cdk-nag on the app."""
    from cdk_nag import AwsSolutionsChecks

    pipeline_config, environments = load_pipeline(path)
    stack = PipelineStack(
        app,
        f"{pipeline_config.name}-pipeline",
        pipeline_config=pipeline_config,
        environments=environments,
        pipeline_file=path.name,
        description=f"fminfra promotion pipeline: {' -> '.join(c.name for c in environments)}",
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack
