"""An AMP managed scraper (`AWS::APS::Scraper`) that collects an EKS cluster's exporters."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from fminfra.core.errors import ValidationError
from fminfra.eks.constructs.karpenter import CHART as KARPENTER_CHART
from fminfra.eks.rules import (
    KARPENTER_METRICS_PATH,
    KARPENTER_METRICS_PORT,
    KARPENTER_METRICS_PORT_NAME,
    KARPENTER_NAMESPACE,
    KARPENTER_RELEASE,
)
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace
from fminfra.observability.rules.inputs import scrape_interval_problem

# The service principal that assumes a scraper's source role (docs/facts/observability.md#amp-scraper-role-configuration).
SCRAPER_SERVICE_PRINCIPAL = "scraper.aps.amazonaws.com"

# Scrape job name -> container port of the exporter pods (the DCGM exporter and node exporter
# charts). The job names match the nodes' Prometheus agent, so one set of rules serves both.
DEFAULT_JOBS = {"dcgm": 9400, "node": 9100}
# The job of Karpenter's controller (`karpenter_scrape_job`), where Karpenter runs.
KARPENTER_JOB = "karpenter"


@dataclass(frozen=True, kw_only=True)
class PodScrapeJob:
    """A scrape job over pods found by Kubernetes service discovery: those whose container port is
    `port` and, when given, named `port_name`, in `namespace`, carrying every label of `pod_labels`.

    node_label: the label that gets the pod's node (`node`; another name where the exporter's own
      series carry a `node` label, which the target's would rename to `exported_node`).
    metrics_path: the HTTP path. Default: /metrics (Prometheus's).
    """

    port: int
    port_name: str | None = None
    namespace: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    node_label: str = "node"
    metrics_path: str = "/metrics"


def karpenter_scrape_job() -> PodScrapeJob:
    """Karpenter's controller as its chart's Service selects it: the release's pods (the chart's
    selector labels) in its namespace, on the container port the Service targets, at /metrics
    (docs/facts/karpenter.md#karpenter-metrics-endpoint). Only the port would also keep other
    pods on 8080 (the load balancer controller's metrics). Karpenter's series carry `node` and
    `namespace` labels of their own (the pod's, in `karpenter_pods_state`), so the controller's
    node goes to `exporter_node`."""
    return PodScrapeJob(
        port=KARPENTER_METRICS_PORT,
        port_name=KARPENTER_METRICS_PORT_NAME,
        namespace=KARPENTER_NAMESPACE,
        pod_labels={"app.kubernetes.io/name": KARPENTER_CHART, "app.kubernetes.io/instance": KARPENTER_RELEASE},
        node_label="exporter_node",
        metrics_path=KARPENTER_METRICS_PATH,
    )


def scrape_jobs(*, karpenter: bool) -> dict[str, int | PodScrapeJob]:
    """The jobs of a cluster's scraper: the exporters everywhere, Karpenter's controller where it runs."""
    jobs: dict[str, int | PodScrapeJob] = dict(DEFAULT_JOBS)
    if karpenter:
        jobs[KARPENTER_JOB] = karpenter_scrape_job()
    return jobs


def _meta_label(label: str) -> str:
    """Service discovery's meta label of a pod label (Prometheus writes invalid characters as `_`)."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def _job_config(name: str, job: PodScrapeJob) -> dict[str, Any]:
    keep = [{"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(job.port), "action": "keep"}]
    if job.port_name is not None:
        keep.append({"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": job.port_name, "action": "keep"})
    if job.namespace is not None:
        keep.append({"source_labels": ["__meta_kubernetes_namespace"], "regex": job.namespace, "action": "keep"})
    for label, value in job.pod_labels.items():
        keep.append({"source_labels": [_meta_label(label)], "regex": value, "action": "keep"})
    config: dict[str, Any] = {"job_name": name}
    if job.metrics_path != "/metrics":
        config["metrics_path"] = job.metrics_path
    config["kubernetes_sd_configs"] = [{"role": "pod"}]
    config["relabel_configs"] = [
        *keep,
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": job.node_label},
        # not `namespace`: the DCGM exporter labels a GPU's series with its workload's namespace
        # (docs/facts/observability.md#dcgm-exporter-kubernetes-labels)
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "exporter_namespace"},
    ]
    return config


def scrape_configuration(scrape_interval_seconds: int, jobs: Mapping[str, int | PodScrapeJob]) -> str:
    """The Prometheus scrape configuration of the scraper: pods found by Kubernetes service
    discovery, kept by exporter port (and the job's port name, namespace and pod labels), labelled
    with their node. A job given as a port is `PodScrapeJob(port=port)`."""
    configs = [_job_config(name, job if isinstance(job, PodScrapeJob) else PodScrapeJob(port=job)) for name, job in jobs.items()]
    interval = f"{scrape_interval_seconds}s"
    return yaml.safe_dump({"global": {"scrape_interval": interval, "scrape_timeout": interval}, "scrape_configs": configs}, sort_keys=False)


def configuration_blob(configuration: str) -> str:
    """`ScrapeConfiguration.ConfigurationBlob` as CloudFormation takes it: the YAML, base64-encoded."""
    return base64.b64encode(configuration.encode("utf-8")).decode("ascii")


@dataclass(frozen=True, kw_only=True)
class AmpScraperProps:
    """Props of `AmpScraper`.

    cluster_arn: ARN of the EKS cluster to scrape (`cluster.cluster_arn`).
    subnets: 2-5 subnets of the cluster's VPC in at least two AZs, where the scraper's network
      interfaces go.
    security_groups: groups of those interfaces; the exporter pods must accept them on their
      ports (the cluster security group does). Default: none (the VPC's default group).
    workspace: the AMP workspace the samples go to.
    scrape_interval_seconds: 30 to 300 (the collector refuses less than 30). Default: 30.
    jobs: job name -> exporter container port, or a `PodScrapeJob`. Default: dcgm 9400, node 9100
      (`scrape_jobs(karpenter=True)` adds Karpenter's controller).
    alias: the scraper's alias; include the environment name. Default: none.

    Nothing in the cluster is declared for the scraper: with the cluster's authentication mode
    `API` or `API_AND_CONFIG_MAP`, AMP creates the scraper's EKS access entry and its read-only
    permissions itself, and a second access entry for the same role fails
    (docs/facts/observability.md#amp-scraper-creates-its-access-entry).
    """

    cluster_arn: str
    subnets: Sequence[ec2.ISubnet]
    workspace: PrometheusWorkspace
    security_groups: Sequence[ec2.ISecurityGroup] = field(default_factory=tuple)
    scrape_interval_seconds: int = 30
    jobs: Mapping[str, int | PodScrapeJob] = field(default_factory=lambda: dict(DEFAULT_JOBS))
    alias: str | None = None


class AmpScraper(Construct):
    """Creates an `AWS::APS::Scraper` from an EKS cluster into an AMP workspace, writing through a
    role configuration: the workspace is encrypted with a customer managed key, and AMP's guide
    creates the scraper of such a workspace with a source and a target role in the same account
    (docs/facts/observability.md#amp-scraper-role-configuration). The source role is assumed by
    `scraper.aps.amazonaws.com` and may only assume the target role; the target role may only
    remote-write to this workspace and use its key through AMP. Both trust policies name the
    scraper by an ARN pattern of this account and region (`scraper/*`), because the scraper's own
    ARN exists only after the scraper, which needs the roles first
    (docs/facts/observability.md#amp-scraper-trust-before-the-scraper).

    Attributes: `scraper` (the L1), `scraper_arn`, `role_arn` (the scraper's service-linked role,
    its identity in the cluster), `source_role`, `target_role`, `configuration` (the scrape
    configuration YAML).
    """

    def __init__(self, scope: Construct, construct_id: str, props: AmpScraperProps) -> None:
        super().__init__(scope, construct_id)
        if not 2 <= len(props.subnets) <= 5:
            raise ValidationError(f"subnets must list 2 to 5 subnets in at least two AZs, got {len(props.subnets)}", path="subnets")
        azs = [s.availability_zone for s in props.subnets]
        if not any(cdk.Token.is_unresolved(az) for az in azs) and len(set(azs)) < 2:
            raise ValidationError(f"subnets must be in at least two AZs, got only {azs[0]}", path="subnets")
        if problem := scrape_interval_problem(props.scrape_interval_seconds):
            raise ValidationError(f"scrape_interval_seconds {problem}", path="scrape_interval_seconds")
        if not props.jobs:
            raise ValidationError("jobs must name at least one job and port", path="jobs")
        for job, spec in props.jobs.items():
            port = spec.port if isinstance(spec, PodScrapeJob) else spec
            if not 1 <= port <= 65535:
                raise ValidationError(f"jobs[{job!r}] must be a port 1-65535, got {port}")
        self.configuration = scrape_configuration(props.scrape_interval_seconds, props.jobs)
        stack = cdk.Stack.of(self)
        scrapers = stack.format_arn(service="aps", resource="scraper", resource_name="*")
        self.source_role = iam.Role(
            self,
            "SourceRole",
            assumed_by=iam.ServicePrincipal(
                SCRAPER_SERVICE_PRINCIPAL,
                conditions={"ArnLike": {"aws:SourceArn": scrapers}, "StringEquals": {"aws:SourceAccount": stack.account}},
            ),
            description="AMP managed scraper: the source role, which may only assume the target role",
        )
        self.target_role = iam.Role(
            self,
            "TargetRole",
            assumed_by=iam.ArnPrincipal(self.source_role.role_arn).with_conditions({"StringLike": {"sts:ExternalId": scrapers}}),
            description="AMP managed scraper: the target role, which may only remote-write to its workspace",
        )
        self.target_role.grant_assume_role(self.source_role)
        write = props.workspace.grant_remote_write(self.target_role)
        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=props.alias,
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=props.cluster_arn,
                    subnet_ids=[s.subnet_id for s in props.subnets],
                    security_group_ids=[g.security_group_id for g in props.security_groups] or None,
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=props.workspace.workspace_arn)
            ),
            # CloudFormation takes the YAML base64-encoded (docs/facts/observability.md#amp-scraper-configuration-blob-base64).
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(configuration_blob=configuration_blob(self.configuration)),
            role_configuration=aps.CfnScraper.RoleConfigurationProperty(
                source_role_arn=self.source_role.role_arn, target_role_arn=self.target_role.role_arn
            ),
        )
        # AMP assumes the roles when it creates the scraper: their policies exist first (the roles
        # themselves through the GetAtt).
        for dependency in (write, *self._default_policies()):
            self.scraper.node.add_dependency(dependency)
        self.scraper_arn: str = self.scraper.attr_arn
        self.role_arn: str = self.scraper.attr_role_arn

    def _default_policies(self) -> list[IConstruct]:
        return [c for c in (self.source_role.node.try_find_child("DefaultPolicy"),) if c is not None]
