"""GitHub Actions OIDC: one account-level stack per AWS account, outside the environment Stages.

An account holds one OIDC provider per URL, so the provider cannot live in an environment's
Stage (two environments in one account would both create it). Per AWS account this stack creates
the GitHub OIDC provider (or imports an existing one) and, per environment in that account, a
deploy role that only a workflow job running in the GitHub environment of that name
(`repo:OWNER/REPO:environment:ENV`, or `repo:OWNER@OWNER_ID/REPO@REPO_ID:environment:ENV` for a
repository with immutable subject claims) can assume, plus one diff role for pull requests. The roles can
do one thing: assume that environment's CDK bootstrap roles (deploy, file publishing, lookup),
which hold the actual permissions. Two read-only roles complete it: one for pull-request diffs and
one for the checks that run on the pipeline's branch before an environment's approval (so its
reviewers see preflight and the guard first). Per environment, an acceptance role
(`fminfra-ENV-accept`) lets the deploy job (same subject) and, with `pipeline_account`, the CDK
pipeline's acceptance step reach the environment's cluster for the promotion gate
(docs/promotion.md, "The acceptance gate"). No IAM users, no access keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from fminfra.config import EnvironmentConfig
from fminfra.core.errors import ValidationError
from fminfra.policy.constructs.acknowledge import acknowledge
from fminfra.promotion.rules import (
    BOOTSTRAP_QUALIFIER,
    accept_role_name,
    accept_step_role_name,
    deploy_role_name,
    subject_repository,
)

GITHUB_OIDC_URL = "https://token.actions.githubusercontent.com"
GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"


def github_subject(repository: str, context: str) -> str:
    """A token's `sub` for a job of the repository: `repo:REPOSITORY:CONTEXT` (context
    `environment:ENV`, `pull_request`, `ref:refs/heads/BRANCH`)."""
    return f"repo:{subject_repository(repository)}:{context}"


DEPLOY_BOOTSTRAP_ROLES = ("deploy", "file-publishing", "image-publishing", "lookup")


# accept-remote waits for `fminfra accept` (60 minutes by default) plus 10 minutes.
ACCEPT_SESSION_SECONDS = 3 * 3600

DIFF_ROLE_NAME = "fminfra-github-diff"
CHECK_ROLE_NAME = "fminfra-github-check"

# How long a deploy job's session may last: GitHub-hosted jobs run for at most 6 hours
# (docs/facts/pipeline.md#github-hosted-job-time-limit), and prod's stacks (FSx with EFA, then
# HyperPod nodes) can take longer than the default hour. The workflows ask for exactly this
# (`role-duration-seconds`); IAM allows 1 to 12 hours (docs/facts/pipeline.md#iam-max-session-duration).
DEPLOY_SESSION_SECONDS = 6 * 3600


def bootstrap_role_arn(account: str, region: str, role: str) -> str:
    return f"arn:aws:iam::{account}:role/cdk-{BOOTSTRAP_QUALIFIER}-{role}-role-{account}-{region}"


class GithubOidcStack(cdk.Stack):
    """GitHub OIDC provider and per-environment deploy roles of one AWS account.

    Attributes: `provider_arn`, `deploy_roles` (by environment name), `diff_role`, `check_role`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        account: str,
        repository: str,
        environments: Sequence[EnvironmentConfig],
        existing_provider: bool = False,
        branch: str = "main",
        pipeline_account: str | None = None,
        pipeline_name: str = "fminfra",
        **kwargs: object,
    ) -> None:
        repository = subject_repository(repository)
        others = sorted({e.name for e in environments if e.account != account})
        if others:
            raise ValidationError(f"environments must all be in account {account}; not: {', '.join(others)}", path="environments")
        if not environments:
            raise ValidationError(f"environments must list at least one environment of account {account}", path="environments")
        region = environments[0].region
        super().__init__(scope, construct_id, env=cdk.Environment(account=account, region=region), **kwargs)  # type: ignore[arg-type]
        if existing_provider:
            self.provider_arn = f"arn:aws:iam::{account}:oidc-provider/{GITHUB_OIDC_HOST}"
        else:
            # The native AWS::IAM::OIDCProvider (no Lambda-backed custom resource).
            provider = iam.OidcProviderNative(self, "GithubProvider", url=GITHUB_OIDC_URL, client_ids=["sts.amazonaws.com"])
            self.provider_arn = provider.oidc_provider_arn
        self.deploy_roles: dict[str, iam.Role] = {}
        for env in environments:
            role = iam.Role(
                self,
                f"DeployRole-{env.name}",
                role_name=deploy_role_name(env.name),
                description=f"GitHub Actions deploys of fminfra {env.name} from {repository} (GitHub environment {env.name} only)",
                assumed_by=self._github_principal(repository, github_subject(repository, f"environment:{env.name}")),
                max_session_duration=cdk.Duration.seconds(DEPLOY_SESSION_SECONDS),
            )
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="AssumeCdkBootstrapRoles",
                    actions=["sts:AssumeRole", "sts:TagSession"],
                    resources=[bootstrap_role_arn(env.account, env.region, r) for r in DEPLOY_BOOTSTRAP_ROLES],
                )
            )
            self.deploy_roles[env.name] = role
            cdk.CfnOutput(
                self, f"DeployRoleArn{env.name.replace('-', '')}", value=role.role_arn, description=f"role-to-assume for {env.name}"
            )
        self.accept_roles = {env.name: self._accept_role(env, repository, pipeline_account, pipeline_name) for env in environments}
        lookup_roles = [bootstrap_role_arn(account, r, "lookup") for r in sorted({e.region for e in environments})]
        self.diff_role = self._lookup_only_role(
            "DiffRole",
            DIFF_ROLE_NAME,
            f"GitHub Actions pull-request diffs from {repository}: read-only CDK lookup roles",
            self._github_principal(repository, github_subject(repository, "pull_request")),
            lookup_roles,
            ["sts:AssumeRole", "sts:TagSession"],
        )
        cdk.CfnOutput(self, "DiffRoleArn", value=self.diff_role.role_arn, description="role-to-assume for pull-request diffs")
        # Subject of a job on the branch that names no environment (docs/facts/pipeline.md#github-oidc-subject-claims).
        self.check_role = self._lookup_only_role(
            "CheckRole",
            CHECK_ROLE_NAME,
            f"GitHub Actions checks before approval from {repository} branch {branch}: read-only CDK lookup roles",
            self._github_principal(repository, github_subject(repository, f"ref:refs/heads/{branch}")),
            lookup_roles,
            ["sts:AssumeRole"],
        )
        cdk.CfnOutput(self, "CheckRoleArn", value=self.check_role.role_arn, description="role-to-assume for the checks before approval")

    def _accept_role(self, env: EnvironmentConfig, repository: str, pipeline_account: str | None, pipeline_name: str) -> iam.Role:
        """Reach the environment's cluster and nothing else: on HyperPod Slurm, find the login node
        (DescribeCluster, ListClusterNodes) and open a non-interactive SSM session on it; on EKS,
        describe the EKS cluster (the EKS path of `fminfra accept` builds its token from that), and so with
        `serving.gate_access` on any cluster that serves (the serving gate reads its Services)."""
        principals: list[iam.IPrincipal] = [self._github_principal(repository, github_subject(repository, f"environment:{env.name}"))]
        if pipeline_account:
            step_role = f"arn:aws:iam::{pipeline_account}:role/{accept_step_role_name(pipeline_name, env.name)}"
            principals.append(iam.AccountPrincipal(pipeline_account).with_conditions({"ArnEquals": {"aws:PrincipalArn": step_role}}))
        role = iam.Role(
            self,
            f"AcceptRole-{env.name}",
            role_name=accept_role_name(env.name),
            description=f"fminfra {env.name} acceptance gate: reach the environment's cluster to run fminfra accept",
            assumed_by=iam.CompositePrincipal(*principals),
            max_session_duration=cdk.Duration.seconds(ACCEPT_SESSION_SECONDS),
        )
        orchestrator = env.compute.orchestrator
        clusters = f"arn:aws:sagemaker:{env.region}:{env.account}:cluster/*"
        if orchestrator == "slurm":
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="FindTheLoginNode", actions=["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"], resources=[clusters]
                )
            )
            # Which resource StartSession is authorized against for a sagemaker-cluster: target is
            # documented nowhere: the Service Authorization Reference lists document, EC2 instance,
            # SSM managed-instance and ECS task only, and AWS's HyperPod IAM example grants
            # StartSession on "*" (docs/facts/iam.md#iam-ssm-start-session-hyperpod-target). So "*",
            # with SSM checking access to the session document (ssm:SessionDocumentAccessCheck), and
            # explicit denials of documented targets that are not HyperPod nodes (this account's EC2
            # instances and ECS tasks) and of this account's own session documents (among them
            # SSM-SessionManagerRunShell, the default interactive shell; AWS-StartNonInteractiveCommand
            # is AWS-owned, with no account in its ARN).
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="NonInteractiveSessionOnTheNode",
                    actions=["ssm:StartSession"],
                    resources=["*"],
                    conditions={"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}},
                )
            )
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="NoSessionOnOtherTargetsOrDocuments",
                    effect=iam.Effect.DENY,
                    actions=["ssm:StartSession"],
                    resources=[
                        f"arn:aws:ec2:*:{env.account}:instance/*",
                        f"arn:aws:ecs:*:{env.account}:task/*",
                        f"arn:aws:ssm:*:{env.account}:document/*",
                    ],
                )
            )
            # End its own sessions only. A session id begins with an IAM user's name, so
            # `session/${aws:userid}-*` never matches an assumed role's sessions (aws:userid is
            # ROLE_ID:SESSION_NAME there); Session Manager tags every session with
            # aws:ssmmessages:session-id = ROLE_ID:SESSION_NAME for an assumed role, and its guide's
            # method for those is that tag against ${aws:userid} (docs/facts/iam.md#ssm-terminate-own-sessions-assumed-role).
            own_sessions = f"arn:aws:ssm:{env.region}:{env.account}:session/*"
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="EndItsOwnSessions",
                    actions=["ssm:TerminateSession"],
                    resources=[own_sessions],
                    conditions={"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": "${aws:userid}"}},  # as the guide writes it
                )
            )
            acknowledge(
                role,
                f"IAM5[Resource::{clusters}]",
                "a HyperPod cluster's ARN ends in an id SageMaker assigns at creation, unknown when this account-level stack is "
                "synthesized: read-only Describe/List on this account's and region's clusters only",
            )
            acknowledge(
                role,
                "IAM5[Resource::*]",
                "ssm:StartSession on a sagemaker-cluster: target: no resource form is documented for it (the Service Authorization "
                "Reference lists document, instance, managed-instance, task; AWS's HyperPod IAM example uses *); this account's EC2 "
                "instances, ECS tasks and own session documents are denied explicitly",
            )
            acknowledge(
                role,
                f"IAM5[Resource::{own_sessions}]",
                "ssm:TerminateSession on this account's and region's sessions whose AWS-applied aws:ssmmessages:session-id tag is this "
                "role session's own ${aws:userid}: the sessions it started only",
            )
        if orchestrator == "eks" or env.serving_gate_access:
            # the EKS path of accept, and the serving gate's kubectl (docs/serving.md#the-serving-gate)
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="DescribeTheEksCluster",
                    actions=["eks:DescribeCluster"],
                    resources=[f"arn:aws:eks:{env.region}:{env.account}:cluster/{env.physical_name('eks')}"],
                )
            )
        cdk.CfnOutput(self, f"AcceptRoleArn{env.name.replace('-', '')}", value=role.role_arn, description=f"acceptance gate of {env.name}")
        return role

    def _lookup_only_role(
        self, construct_id: str, role_name: str, description: str, principal: iam.IPrincipal, lookup_roles: list[str], actions: list[str]
    ) -> iam.Role:
        """A one-hour role that can do one thing: assume the account's read-only CDK lookup roles."""
        role = iam.Role(
            self,
            construct_id,
            role_name=role_name,
            description=description,
            assumed_by=principal,
            max_session_duration=cdk.Duration.hours(1),
        )
        role.add_to_policy(iam.PolicyStatement(sid="AssumeCdkLookupRoles", actions=actions, resources=lookup_roles))
        return role

    def _github_principal(self, repository: str, subject: str) -> iam.IPrincipal:
        return iam.FederatedPrincipal(
            self.provider_arn,
            conditions={
                "StringEquals": {f"{GITHUB_OIDC_HOST}:aud": "sts.amazonaws.com", f"{GITHUB_OIDC_HOST}:sub": subject},
            },
            assume_role_action="sts:AssumeRoleWithWebIdentity",
        )


def github_oidc_stacks(
    scope: Construct,
    configs: Sequence[EnvironmentConfig],
    *,
    repository: str,
    existing_provider: bool = False,
    branch: str = "main",
    pipeline_account: str | None = None,
    pipeline_name: str = "fminfra",
) -> list[GithubOidcStack]:
    """One `GithubOidcStack` per AWS account of the configs, named `fminfra-github-oidc-ACCOUNT`."""
    by_account: dict[str, list[EnvironmentConfig]] = {}
    for cfg in configs:
        by_account.setdefault(cfg.account, []).append(cfg)
    return [
        GithubOidcStack(
            scope,
            f"fminfra-github-oidc-{account}",
            account=account,
            repository=repository,
            environments=envs,
            existing_provider=existing_provider,
            branch=branch,
            pipeline_account=pipeline_account,
            pipeline_name=pipeline_name,
            description=f"fminfra: GitHub Actions OIDC provider and deploy roles for {', '.join(e.name for e in envs)}",
        )
        for account, envs in sorted(by_account.items())
    ]
