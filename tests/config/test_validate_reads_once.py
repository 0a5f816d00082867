"""Validation reads the platform's published data (botocore's service models, cfn-lint's schemas) once
per process, not once per config or per field: `validate` of a folder and the tests that validate
thousands of configs depend on it (a model load is tens of milliseconds, a config's checks under one)."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import botocore.session
import pytest
import yaml

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from tests.conftest import ALL_CONFIGS


def _validate_all() -> None:
    for path in ALL_CONFIGS:
        data = yaml.safe_load(path.read_text())
        for _ in range(3):
            with contextlib.suppress(ConfigError):
                parse_config(data, path.name)


def _loads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    loads: Counter[str] = Counter()
    original = botocore.session.Session.get_service_model

    def counting(self: Any, service_name: str, api_version: Any = None) -> Any:
        loads[service_name] += 1
        return original(self, service_name, api_version)

    monkeypatch.setattr(botocore.session.Session, "get_service_model", counting)
    return loads


def test_each_service_model_is_read_at_most_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _validate_all()  # whatever earlier tests cached, the counting starts now
    loads = _loads(monkeypatch)
    _validate_all()
    assert {s: n for s, n in loads.items() if n > 0} == {}


def test_the_check_fails_on_a_model_read_per_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the test: HyperPod's instance types read from botocore again for each config, as they were."""
    from fminfra.hyperpod import rules

    _validate_all()
    loads = _loads(monkeypatch)
    for path in ALL_CONFIGS:
        rules.hyperpod_instance_types.cache_clear()
        with contextlib.suppress(ConfigError):
            parse_config(yaml.safe_load(path.read_text()), path.name)
    assert loads["sagemaker"] > 1  # what the check above refuses
