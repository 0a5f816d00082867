"""The observability section of the config and its exact messages, no synth."""

from __future__ import annotations

from typing import Any

import pytest

from fminfra.config import parse_config
from tests.config.test_environment import DEV, _problems, _with

GROUP = "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
TOPIC = "arn:aws:sns:us-west-2:111111111111:oncall"

BAD: list[tuple[str, Any, str]] = [
    (
        "observability.alerts.emails",
        ["oncall@example.com", "not-an-address"],
        "f.yaml: observability.alerts.emails[1]: must be an email address such as oncall@example.com, got 'not-an-address'",
    ),
    (
        "observability.alerts.emails",
        ["a@example.com", "a@example.com"],
        "f.yaml: observability.alerts.emails: email addresses must be unique",
    ),
    (
        "observability.alerts.sns_topic_arn",
        "oncall",
        "f.yaml: observability.alerts.sns_topic_arn: must be arn:aws:sns:REGION:ACCOUNT:NAME (a standard topic), got 'oncall'",
    ),
    (
        "observability.alerts.sns_topic_arn",
        "arn:aws:sns:us-east-1:111111111111:oncall",
        "f.yaml: observability.alerts.sns_topic_arn: CloudWatch alarms and the AMP alert manager publish only to a topic in their own "
        "account and region (111111111111, us-west-2), got 111111111111, us-east-1",
    ),
    (
        "observability.grafana",
        {"enabled": True, "admin_group_ids": ["admins"]},
        "f.yaml: observability.grafana.admin_group_ids[0]: must be an Identity Center group id such as "
        "1234567890-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d or 0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, got 'admins'",
    ),
    (
        "observability.grafana",
        {"enabled": False, "admin_group_ids": [GROUP]},
        "f.yaml: observability.grafana.admin_group_ids: only used with enabled: true; set enabled: true or remove the group ids",
    ),
    (
        "observability.grafana",
        {"enabled": True, "auth": "saml"},
        "f.yaml: observability.grafana.auth: Input should be 'sso', got 'saml'",
    ),
    (
        "observability",
        {"prometheus": False, "grafana": {"enabled": True}},
        "f.yaml: observability.grafana.enabled: Grafana's dashboards query the AMP workspace; set prometheus: true or grafana.enabled: false",
    ),
    (
        "observability.scrape_interval_seconds",
        1,
        "f.yaml: observability.scrape_interval_seconds: must be 30 to 300 seconds (the AMP managed collector refuses intervals below 30 s), got 1",
    ),
    (
        "observability.scrape_interval_seconds",
        5,
        "f.yaml: observability.scrape_interval_seconds: must be 30 to 300 seconds (the AMP managed collector refuses intervals below 30 s), got 5",
    ),
    (
        "observability.scrape_interval_seconds",
        29,
        "f.yaml: observability.scrape_interval_seconds: must be 30 to 300 seconds (the AMP managed collector refuses intervals below 30 s), got 29",
    ),
    (
        "observability.scrape_interval_seconds",
        301,
        "f.yaml: observability.scrape_interval_seconds: must be 30 to 300 seconds (the AMP managed collector refuses intervals below 30 s), got 301",
    ),
    (
        "observability.alerts",
        {"email": ["a@example.com"]},
        "f.yaml: observability.alerts.email: unknown field (allowed here: emails, sns_topic_arn)",
    ),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD, ids=[f"{p}={v!r}"[:60] for p, v, _ in BAD])
def test_bad_observability_values_give_one_exact_line(path: str, value: Any, expected: str) -> None:
    assert _problems(_with(DEV, path, value)) == [expected]


def test_omitted_section_turns_on_prometheus_and_alerting_not_grafana() -> None:
    cfg = parse_config(_with(DEV, "observability", ...) if "observability" in DEV else DEV)
    assert cfg.observability.prometheus is True
    assert cfg.observability.grafana.enabled is False
    assert cfg.observability.alerts.emails == [] and cfg.observability.alerts.sns_topic_arn is None
    assert cfg.observability.scrape_interval_seconds == 30


def test_good_values_are_kept() -> None:
    section = {
        "grafana": {"enabled": True, "admin_group_ids": [GROUP, f"1234567890-{GROUP}"]},
        "alerts": {"emails": ["oncall@example.com"], "sns_topic_arn": TOPIC},
        "scrape_interval_seconds": 300,
    }
    cfg = parse_config(_with(DEV, "observability", section))
    assert cfg.observability.grafana.admin_group_ids == [GROUP, f"1234567890-{GROUP}"]
    assert cfg.observability.alerts.sns_topic_arn == TOPIC
