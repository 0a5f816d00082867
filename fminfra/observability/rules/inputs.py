"""Observability's input rules (the rest of this package is the alert and recording rules as code):
what an alert address, an SNS topic, an Identity Center group, an AMP alert manager namespace and a
Grafana workspace name may be. The config (`observability/config.py`) and the constructs
(`observability/constructs/`) both check through these."""

from __future__ import annotations

import re

from fminfra.core.rules import Pattern

EMAIL = Pattern(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", "an email address such as oncall@example.com")
SNS_TOPIC_ARN_RULE = re.compile(r"^arn:aws[a-z-]*:sns:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):[A-Za-z0-9_-]{1,256}$")
IDENTITY_STORE_GROUP_ID = Pattern(
    r"^([0-9a-f]{10}-|)[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}$",
    "an Identity Center group id such as 1234567890-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d or 0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
)
# AMP rule groups namespaces (AWS::APS::RuleGroupsNamespace Name).
NAMESPACE_NAME = Pattern(r"^[0-9A-Za-z][-.0-9A-Z_a-z]{0,63}$", "1-64 letters, digits, '-', '.', '_'")
# Grafana workspace names (AWS::Grafana::Workspace Name).
GRAFANA_NAME = Pattern(r"^[a-zA-Z0-9-._~]{1,255}$", "1-255 letters, digits and -._~")
# The AMP managed collector refuses a scrape interval below 30 seconds, and the nodes' Prometheus
# agent uses the same interval (docs/facts/observability.md#amp-scraper-minimum-scrape-interval).
SCRAPE_INTERVAL_MIN_SECONDS = 30
SCRAPE_INTERVAL_MAX_SECONDS = 300


def scrape_interval_problem(seconds: int) -> str | None:
    if SCRAPE_INTERVAL_MIN_SECONDS <= seconds <= SCRAPE_INTERVAL_MAX_SECONDS:
        return None
    return (
        f"must be {SCRAPE_INTERVAL_MIN_SECONDS} to {SCRAPE_INTERVAL_MAX_SECONDS} seconds "
        f"(the AMP managed collector refuses intervals below {SCRAPE_INTERVAL_MIN_SECONDS} s), got {seconds}"
    )


def empty_stack_problem(*, prometheus: bool, emails: list[str], existing_topic: bool, file_system: bool) -> str | None:
    """Why the Observability stack would hold no resource (None when it holds one): CloudFormation
    refuses a template without resources (docs/facts/observability.md#cfn-template-needs-a-resource).
    An existing topic is imported, not created; the rest of the stack is Prometheus, the topic's
    email subscriptions and the file system's alarms."""
    if prometheus or emails or not existing_topic or file_system:
        return None
    return (
        "with prometheus: false, no alerts.emails and no storage.lustre, the Observability stack would have no resource "
        "(CloudFormation refuses an empty template); set prometheus: true, add alerts.emails or leave sns_topic_arn out"
    )
