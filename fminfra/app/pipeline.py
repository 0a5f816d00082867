"""Promotion pipeline: one CDK Pipelines stack that deploys the environments in order.

Configured by `pipeline.yaml` at the repository root (it spans environments, so it is not in
config/). Source: a CodeConnections repository. A synth step runs `make test` and
`make synth-pipeline`; then one wave per environment, in the file's order, each deploying
`EnvironmentStage` with that environment's config. Before each deploy, a check step runs
`make preflight` and `make guard-deployed` against the target account; a failing command fails
the step and stops the pipeline there. An environment with `approval: true` gets a manual
approval after its checks (reviewers see the guard's result first) and before its deploy. After an
environment deploys, where its acceptance gate is on (pipeline.yaml `accept.gate`, default: on with
training GPUs), an acceptance step runs `make accept-gate` (`fminfra accept` on the cluster, with the
target's `fminfra-ENV-accept` role); a failing figure fails the step, and the next wave does not start.
Where the cluster's EKS API endpoint is private only (HyperPod EKS without public_access_cidrs), the
step could not reach it: a manual approval of that name asks an operator to run `fminfra accept`
from inside the VPC and approve only on exit 0.

Every command is a `make` target: CodeBuild starts each build in a fresh shell, and the
Makefile's exported PATH is what puts the project's .venv (Python, Node.js) and CDK CLI first
(docs/promotion.md, "One way to run every command").

Cross-account: the pipeline lives in its own (tooling) account; each target account is
bootstrapped with `cdk bootstrap --trust TOOLING_ACCOUNT --cloudformation-execution-policies ...`,
and the pipeline's actions assume the target's CDK roles (docs/promotion.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import pipelines
from constructs import Construct

from fminfra.app.stage import EnvironmentStage
from fminfra.config import EnvironmentConfig
from fminfra.config.pipeline import PipelineConfig, gate_enabled, load_pipeline, needs_private_endpoint, serving_gate_enabled
from fminfra.core.errors import ValidationError
from fminfra.policy.constructs.acknowledge import acknowledge
from fminfra.promotion.rules import BOOTSTRAP_QUALIFIER, accept_role_name, accept_step_role_name
from fminfra.promotion.stack import ACCEPT_SESSION_SECONDS


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


# CodeBuild image of every project the pipeline generates (synth, checks, self-mutation, asset
# publishing): standard 8.0 offers Node.js 22 and 24 and Python 3.11 to 3.14; the runtimes are
# chosen explicitly (docs/facts/pipeline.md#codebuild-standard-image-runtimes), Node.js 22 for the
# CDK CLI that self-mutation and cdk-assets install (docs/facts/pipeline.md#cdk-cli-node-engines).
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_8_0
BUILD_RUNTIMES = {"nodejs": "22", "python": "3.11"}


# The Accept step runs `aws ssm start-session`, which needs the Session Manager plugin; CodeBuild's
# standard 8.0 image has the AWS CLI but not the plugin (docs/facts/pipeline.md#codebuild-standard-8-no-session-manager-plugin).
# AWS's Ubuntu package, pinned (AWS publishes no checksum: the SHA-256 is the one public
# package recipes record for this version; docs/facts/pipeline.md#session-manager-plugin-deb).
SSM_PLUGIN_VERSION = "1.2.835.0"
SSM_PLUGIN_SHA256 = "7c6dcad12518571cc7959a713e6a8ae1bdf6ed66fd9bee37dc189e39ca58ae03"
SSM_PLUGIN_DEB = f"https://s3.amazonaws.com/session-manager-downloads/plugin/{SSM_PLUGIN_VERSION}/ubuntu_64bit/session-manager-plugin.deb"
SSM_PLUGIN_INSTALL = [
    f"curl --fail --silent --show-error --location --max-time 300 --output /tmp/session-manager-plugin.deb {SSM_PLUGIN_DEB}",
    f'echo "{SSM_PLUGIN_SHA256}  /tmp/session-manager-plugin.deb" | sha256sum --check --strict',
    "dpkg -i /tmp/session-manager-plugin.deb",
    "session-manager-plugin --version",
]


def make_command(target: str, config: str) -> str:
    """`make TARGET ENV=NAME CONFIG_DIR=DIR` for an environment's config path."""
    path = Path(config)
    return f"make {target} ENV={path.stem} CONFIG_DIR={path.parent.as_posix()}"


def private_endpoint_gate(cfg: EnvironmentConfig) -> pipelines.ManualApprovalStep:
    """The gate of an environment whose EKS API endpoint is private only: the pipeline's CodeBuild
    (tooling account, no VPC) cannot run `fminfra accept` there, so an operator runs it from inside
    the VPC and approves only on exit 0 (docs/promotion.md, "The acceptance gate")."""
    return pipelines.ManualApprovalStep(
        f"Accept-{cfg.name}",
        comment=(
            f"Acceptance gate of {cfg.name} ({cfg.account}, {cfg.region}): its EKS API endpoint is private, so this pipeline cannot "
            f"run the gate. From a machine in {cfg.name}'s VPC (443 allowed to the cluster security group), with kubectl 1.33-1.35 "
            f"and the role {accept_role_name(cfg.name)}, run `fminfra accept {cfg.name}` (config/{cfg.name}.yaml). "
            "Approve only if it exits 0; reject on exit 1 (a figure failed) or 2 (it could not run)."
        ),
    )


def serving_gate_approval(cfg: EnvironmentConfig) -> pipelines.ManualApprovalStep:
    """The serving gate of an environment with served models: they answer on internal load balancers,
    which the pipeline's CodeBuild (tooling account, no VPC) cannot reach, so an operator runs
    `fminfra accept ENV --serving` from inside the VPC and approves only on exit 0 (docs/serving.md,
    "The serving gate")."""
    return pipelines.ManualApprovalStep(
        f"ServingGate-{cfg.name}",
        comment=(
            f"Serving gate of {cfg.name} ({cfg.account}, {cfg.region}): its models answer on internal load balancers, so this pipeline "
            f"cannot measure them. From a machine in {cfg.name}'s VPC, with kubectl 1.33-1.35 and the role {accept_role_name(cfg.name)}, "
            f"run `fminfra accept config/{cfg.name}.yaml --serving` (thresholds: pipeline.yaml accept.serving). "
            "Approve only if it exits 0; reject on exit 1 (a figure failed) or 2 (it could not run)."
        ),
    )


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
        # A zip of the repository without .git (no clone: docs/facts/pipeline.md#cdk-pipelines-code-build-clone-output);
        # `make test` needs none (docs/facts/pipeline.md#codepipeline-source-zip-no-git).
        source = pipelines.CodePipelineSource.connection(pc.source.repository, pc.source.branch, connection_arn=pc.source.connection_arn)
        # 8 vCPUs, up to 16 GiB (docs/facts/pipeline.md#codebuild-compute-type-memory): `make test` sizes its workers to that.
        build_environment = codebuild.BuildEnvironment(build_image=BUILD_IMAGE, compute_type=codebuild.ComputeType.LARGE)
        runtimes = codebuild.BuildSpec.from_object({"phases": {"install": {"runtime-versions": BUILD_RUNTIMES}}})
        synth = pipelines.ShellStep(
            "Synth",
            input=source,
            commands=["make test", f"make synth-pipeline PIPELINE_FILE={pipeline_file}"],
            primary_output_directory="cdk.out",
        )
        synth_output = synth.primary_output
        assert synth_output is not None  # primary_output_directory is set above
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=f"{pc.name}-promotion",
            synth=synth,
            # Explicit: without the feature flag aws-cdk-lib makes a V1 pipeline
            # (docs/facts/pipeline.md#codepipeline-pipeline-type-default).
            pipeline_type=codepipeline.PipelineType.V2,
            cross_account_keys=True,
            enable_key_rotation=True,
            code_build_defaults=pipelines.CodeBuildOptions(build_environment=build_environment, partial_build_spec=runtimes),
            # Docker Hub refuses anonymous pulls beyond its limit, and CodeBuild pulls from shared addresses: the
            # container assets (the serving EFA image's vLLM base) build logged in where a secret is given
            # (docs/facts/pipeline.md#cdk-pipelines-docker-credentials, docs/facts/serving-image.md#docker-hub-pull-limit).
            docker_credentials=[
                pipelines.DockerCredential.docker_hub(
                    secretsmanager.Secret.from_secret_complete_arn(self, "DockerHubSecret", pc.docker_hub_secret_arn)
                )
            ]
            if pc.docker_hub_secret_arn
            else None,
        )
        self.stages: dict[str, EnvironmentStage] = {}
        self.waves: dict[str, pipelines.Wave] = {}
        self.check_steps: dict[str, pipelines.CodeBuildStep] = {}
        self.approval_steps: dict[str, pipelines.ManualApprovalStep] = {}
        self.accept_steps: dict[str, pipelines.CodeBuildStep] = {}
        self.accept_approvals: dict[str, pipelines.ManualApprovalStep] = {}
        self.serving_approvals: dict[str, pipelines.ManualApprovalStep] = {}
        for env, cfg in zip(pc.environments, environments, strict=True):
            check = pipelines.CodeBuildStep(
                f"Check-{cfg.name}",
                input=source,
                additional_inputs={"cdk.out": synth_output},
                env={"TARGET_ROLE_ARN": bootstrap_role_arn(cfg, "lookup"), "TARGET_REGION": cfg.region},
                commands=[
                    "make deps",
                    *_ASSUME_ROLE_PROFILE,
                    make_command("preflight", env.config),
                    make_command("guard-deployed", env.config),
                ],
                role_policy_statements=[
                    iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[bootstrap_role_arn(cfg, "lookup")]),
                ],
            )
            pre: list[pipelines.Step] = [check]
            if env.approval:
                # After the checks: reviewers read preflight's and the guard's result (the
                # Check step's log) before they approve.
                approval = pipelines.ManualApprovalStep(
                    f"Approve-{cfg.name}",
                    comment=f"Promote to {cfg.name} ({cfg.account}, {cfg.region})? Read the Check-{cfg.name} log (preflight, guard) first.",
                )
                approval.add_step_dependency(check)
                pre.append(approval)
                self.approval_steps[cfg.name] = approval
            wave = self.pipeline.add_wave(cfg.name, pre=pre)
            # Beside the pipeline stack, not inside it: construct paths (and so the logical ids
            # derived from them) are the same as in the standalone app, so moving an environment
            # onto the pipeline changes none of its templates.
            stage = EnvironmentStage(scope, cfg)
            wave.add_stage(stage)
            if needs_private_endpoint(env, cfg):
                # CodeBuild in the tooling account, outside any VPC, cannot reach a private-only EKS
                # endpoint in the target account (docs/facts/eks.md#eks-private-endpoint-reach).
                self.accept_approvals[cfg.name] = private_endpoint_gate(cfg)
                wave.add_post(self.accept_approvals[cfg.name])
            elif gate_enabled(env, cfg):
                self.accept_steps[cfg.name] = self._accept_step(pc, cfg, env.config, source)
                wave.add_post(self.accept_steps[cfg.name])
            if serving_gate_enabled(env, cfg) and cfg.serving is not None:
                serving = self.serving_approvals[cfg.name] = serving_gate_approval(cfg)
                for before in (self.accept_steps.get(cfg.name), self.accept_approvals.get(cfg.name)):
                    if before is not None:
                        serving.add_step_dependency(before)
                wave.add_post(serving)
            self.waves[cfg.name] = wave
            self.stages[cfg.name] = stage
            self.check_steps[cfg.name] = check
        # Build now (CDK Pipelines would build just before synth) so that the generated
        # resources exist to be acknowledged below.
        self.pipeline.build_pipeline()
        self._grant_codeconnections(pc.source.connection_arn)
        self._acknowledge_generated_grants()

    def _accept_step(
        self, pc: PipelineConfig, cfg: EnvironmentConfig, config: str, source: pipelines.CodePipelineSource
    ) -> pipelines.CodeBuildStep:
        """`make accept-gate` with the target's acceptance role (created by the account-level stack,
        fminfra/promotion/stack.py, with `-c pipeline_account=`), which trusts this step's role by
        name; the step's own role may assume that one role only."""
        target_role = f"arn:aws:iam::{cfg.account}:role/{accept_role_name(cfg.name)}"
        role = iam.Role(
            self.pipeline,  # beside the roles CDK Pipelines generates: the same acknowledged log and report grants
            f"AcceptStepRole-{cfg.name}",
            role_name=accept_step_role_name(pc.name, cfg.name),
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description=f"{pc.name} pipeline: acceptance gate of {cfg.name} (assumes {accept_role_name(cfg.name)} there)",
        )
        return pipelines.CodeBuildStep(
            f"Accept-{cfg.name}",
            input=source,
            env={"TARGET_ROLE_ARN": target_role, "TARGET_REGION": cfg.region},
            # the install phase (root, before the build commands): the plugin accept-remote's sessions need
            install_commands=SSM_PLUGIN_INSTALL,
            commands=["make deps", *_ASSUME_ROLE_PROFILE, make_command("accept-gate", config)],
            role=role,
            role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[target_role])],
            # accept's 60 minutes, the remote margin and set-up; within what the target role allows
            timeout=cdk.Duration.seconds(ACCEPT_SESSION_SECONDS - 30 * 60),
        )

    def _grant_codeconnections(self, connection_arn: str) -> None:
        """`codeconnections:UseConnection` for a `codeconnections` ARN.

        aws-cdk-lib grants only `codestar-connections:UseConnection`, and IAM matches the action's
        service prefix to the resource's: a connection created since July 2024 has a
        `codeconnections` ARN, so the source action would be denied
        (docs/facts/pipeline.md#codeconnections-iam-prefix).
        """
        if ":codeconnections:" not in connection_arn:
            return
        source_stage = self.pipeline.pipeline.stages[0].stage_name
        roles = [c for c in self.pipeline.pipeline.node.find_all() if isinstance(c, iam.Role) and f"/{source_stage}/" in c.node.path]
        if not roles:
            raise ValidationError(f"pipeline: no role found for the {source_stage} action to grant codeconnections:UseConnection")
        for role in roles:
            role.add_to_principal_policy(iam.PolicyStatement(actions=["codeconnections:UseConnection"], resources=[connection_arn]))

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
            "the artifact bucket holds only build artifacts, reachable by the pipeline roles alone and SSE-KMS encrypted with the pipeline's "
            "key: each object read or write calls KMS, and CloudTrail records KMS calls as management events by default (S3 object-level "
            "data events only where the account enables them)",
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
