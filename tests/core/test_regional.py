"""Regional availability: the shipped table equals what the installed cfn-lint publishes (AWS's
CloudFormation schemas per region and HyperPod's instance types per region), and validate refuses
a service or HyperPod type the region does not offer, in one line."""

from __future__ import annotations

import copy
import importlib.util
import json
from typing import Any

import pytest
import yaml

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from fminfra.core.regional import DATA
from tests.conftest import ROOT

DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())


def _refresh_module() -> Any:
    spec = importlib.util.spec_from_file_location("refresh_regional_data", ROOT / "scripts" / "refresh_regional_data.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_table_is_what_the_installed_cfn_lint_publishes() -> None:
    """Fails after a cfn-lint bump until `python scripts/refresh_regional_data.py` is run and reviewed."""
    assert json.loads(DATA.read_text()) == _refresh_module().build()


def _in_region(region: str, az_prefix: str, **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(DEV)
    data["region"] = region
    data["network"]["az_ids"] = [f"{az_prefix}-az1", f"{az_prefix}-az2"]
    data["network"]["compute_az_id"] = f"{az_prefix}-az1"
    for path, value in changes.items():
        target = data
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


def test_a_hyperpod_type_the_region_does_not_offer_is_one_line() -> None:
    data = _in_region("eu-west-1", "euw1")
    data["compute"]["instance_groups"][0]["instance_type"] = "p5en.48xlarge"
    (line,) = _problems(data)
    assert line.startswith(
        "f.yaml: compute.instance_groups[0].instance_type: ml.p5en.48xlarge is not offered by HyperPod in eu-west-1; GPU types offered there: "
    )
    # The same group in us-west-2, where HyperPod offers it, passes.
    ok = copy.deepcopy(DEV)
    ok["compute"]["instance_groups"][0]["instance_type"] = "p5en.48xlarge"
    assert parse_config(ok).compute.instance_groups[0].instance_type == "p5en.48xlarge"


def test_a_service_the_region_does_not_offer_is_one_line_each() -> None:
    assert _problems(_in_region("us-gov-west-1", "usgw1")) == [
        "f.yaml: region: SageMaker HyperPod (AWS::SageMaker::Cluster) is not offered in us-gov-west-1; choose another region"
    ]
    problems = _problems(_in_region("cn-north-1", "cnn1"))
    assert (
        "f.yaml: region: Amazon Managed Service for Prometheus (AWS::APS::Workspace) is not offered in cn-north-1; choose another region"
        in problems
    )


def test_the_described_compute_quota_regions_come_from_the_schema_description(tmp_path: Any) -> None:
    """The schema's description is the second source on compute quotas (docs/facts/hyperpod.md#hyperpod-compute-quota-schema);
    the refresh script reads it and stops on a description it cannot read rather than writing a wrong list."""
    refresh = _refresh_module()
    shipped = json.loads(DATA.read_text())["compute_quota_described_regions"]
    assert len(shipped) == 15 and {"us-east-1", "us-west-1", "ap-northeast-1"} <= set(shipped) and "ca-central-1" not in shipped
    (tmp_path / "resources").mkdir()
    schema = tmp_path / "resources" / "x.json"
    for description, expected in [
        ("Quotas. Available in 2 regions (us-east-1, eu-west-1).", ["eu-west-1", "us-east-1"]),
        ("Quotas. Available in 3 regions (us-east-1, eu-west-1).", "says 3 regions but names 2"),
        ("Quotas.", "names no regions"),
    ]:
        schema.write_text(json.dumps({"typeName": "AWS::SageMaker::ComputeQuota", "description": description}))
        if isinstance(expected, list):
            assert refresh.described_regions(tmp_path, "AWS::SageMaker::ComputeQuota") == expected
            continue
        with pytest.raises(SystemExit) as info:
            refresh.described_regions(tmp_path, "AWS::SageMaker::ComputeQuota")
        assert expected in str(info.value)
