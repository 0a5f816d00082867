"""An AMP managed scraper (`AWS::APS::Scraper`) that collects an EKS cluster's exporters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
import yaml
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.observability.constructs.prometheus_workspace import PrometheusWorkspace

# Scrape job name -> container port of the exporter pods (the DCGM exporter and node exporter
# charts). The job names match the nodes' Prometheus agent, so one set of rules serves both.
DEFAULT_JOBS = {"dcgm": 9400, "node": 9100}


def scrape_configuration(scrape_interval_seconds: int, jobs: dict[str, int]) -> str:
    """The Prometheus scrape configuration of the scraper: pods found by Kubernetes service
    discovery, kept by exporter port, labelled with their node."""
    configs = []
    for job, port in jobs.items():
        configs.append(
            {
                "job_name": job,
                "kubernetes_sd_configs": [{"role": "pod"}],
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_pod_container_port_number"], "regex": str(port), "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                ],
            }
        )
    interval = f"{scrape_interval_seconds}s"
    return yaml.safe_dump({"global": {"scrape_interval": interval, "scrape_timeout": interval}, "scrape_configs": configs}, sort_keys=False)


@dataclass(frozen=True, kw_only=True)
class AmpScraperProps:
    """Props of `AmpScraper`.

    cluster_arn: ARN of the EKS cluster to scrape (`cluster.cluster_arn`).
    subnets: 2-5 subnets of the cluster's VPC in at least two AZs, where the scraper's network
      interfaces go.
    security_groups: groups of those interfaces; the exporter pods must accept them on their
      ports (the cluster security group does). Default: none (the VPC's default group).
    workspace: the AMP workspace the samples go to.
    scrape_interval_seconds: Default: 30.
    jobs: job name -> exporter container port. Default: dcgm 9400, node 9100.
    alias: the scraper's alias; include the environment name. Default: none.

    The scraper's role (`role_arn`) needs an EKS access entry and a ClusterRole allowing it to
    list and get pods, nodes and endpoints: the cluster's stack adds them.
    """

    cluster_arn: str
    subnets: Sequence[ec2.ISubnet]
    workspace: PrometheusWorkspace
    security_groups: Sequence[ec2.ISecurityGroup] = field(default_factory=tuple)
    scrape_interval_seconds: int = 30
    jobs: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_JOBS))
    alias: str | None = None


class AmpScraper(Construct):
    """Creates an `AWS::APS::Scraper` from an EKS cluster into an AMP workspace.

    Attributes: `scraper` (the L1), `scraper_arn`, `role_arn` (the role the scraper uses in the
    cluster), `configuration` (the scrape configuration YAML).
    """

    def __init__(self, scope: Construct, construct_id: str, props: AmpScraperProps) -> None:
        super().__init__(scope, construct_id)
        if not 2 <= len(props.subnets) <= 5:
            raise ValidationError(f"subnets must list 2 to 5 subnets in at least two AZs, got {len(props.subnets)}")
        azs = [s.availability_zone for s in props.subnets]
        if not any(cdk.Token.is_unresolved(az) for az in azs) and len(set(azs)) < 2:
            raise ValidationError(f"subnets must be in at least two AZs, got only {azs[0]}")
        if not 5 <= props.scrape_interval_seconds <= 300:
            raise ValidationError(f"scrape_interval_seconds must be 5 to 300, got {props.scrape_interval_seconds}")
        if not props.jobs:
            raise ValidationError("jobs must name at least one job and port")
        for job, port in props.jobs.items():
            if not 1 <= port <= 65535:
                raise ValidationError(f"jobs[{job!r}] must be a port 1-65535, got {port}")
        self.configuration = scrape_configuration(props.scrape_interval_seconds, props.jobs)
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
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(configuration_blob=self.configuration),
        )
        self.scraper_arn: str = self.scraper.attr_arn
        self.role_arn: str = self.scraper.attr_role_arn
