"""Regional availability: the shipped table equals what the installed cfn-lint publishes (AWS's
CloudFormation schemas per region and HyperPod's instance types per region), and validate refuses
a service or HyperPod type the region does not offer, in one line."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from fminfra.core.regional import DATA
from tests.conftest import ROOT, CliSynth

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


def test_the_shipped_ec2_table_is_what_the_installed_cfn_lint_publishes() -> None:
    """Fails after a cfn-lint bump until `python -m tests.core.ec2_regional_data` is run and reviewed."""
    from fminfra.core.regional import EC2_DATA
    from tests.core.ec2_regional_data import build

    assert json.loads(EC2_DATA.read_text()) == build()


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


# Every regional rule: a resource type an environment may create, a config that creates it, and the field a
# refusal names. cfn-lint's list of resource types for the region is the gate's (`fminfra gate` fails on E3006
# "Resource type ... does not exist in <region>"), so validate must refuse exactly where that list lacks the type.
REGIONAL_RULES = {
    "AWS::SageMaker::Cluster": ("config/dev.yaml", "region"),
    "AWS::EKS::Cluster": ("tests/configs/eks-inference-only.yaml", "region"),
    "AWS::FSx::FileSystem": ("config/dev.yaml", "region"),
    "AWS::APS::Workspace": ("tests/configs/obs-grafana.yaml", "region"),
    "AWS::APS::Scraper": ("tests/configs/capacity-eks.yaml", "region"),
    "AWS::Grafana::Workspace": ("tests/configs/obs-grafana.yaml", "region"),
    "AWS::EC2::CapacityReservation": ("examples/ec2-odcr.yaml", "region"),
    "AWS::SageMaker::ComputeQuota": ("tests/configs/capacity-eks.yaml", "compute.eks.scheduling.task_governance"),
    "AWS::SageMaker::ClusterSchedulerConfig": ("tests/configs/capacity-eks.yaml", "compute.eks.scheduling.priority_classes"),
}
# Types created only beside another type of REGIONAL_RULES, in no region without it.
GOES_WITH = {"AWS::APS::RuleGroupsNamespace": "AWS::APS::Workspace"}


def _moved(path: str, region: str) -> dict[str, Any]:
    from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION, AZ_IDS_BY_REGION

    data = yaml.safe_load((ROOT / path).read_text())
    known = AZ_IDS_BY_REGION.get(region)
    az_ids = list(known[:2]) if known else [f"{AZ_ID_PREFIX_BY_REGION[region]}-az1", f"{AZ_ID_PREFIX_BY_REGION[region]}-az2"]
    data["region"], data["network"]["az_ids"] = region, az_ids
    if "compute_az_id" in data["network"]:
        data["network"]["compute_az_id"] = az_ids[0]
    return data


def _cfn_lint_types(region: str) -> set[str] | None:
    """The gate's own data: cfn-lint's provider schema list for the region (None where it ships none)."""
    import cfnlint

    path = Path(cfnlint.__file__).parent / "data" / "schemas" / "providers" / f"{region}.json"
    return set(json.loads(path.read_text())) if path.exists() else None


def _rule_disagreements() -> list[str]:
    """(rule, region) pairs where validate's refusal and cfn-lint's list for the region disagree."""
    from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION

    out = []
    for region in AZ_ID_PREFIX_BY_REGION:
        types = _cfn_lint_types(region)
        if types is None:
            continue
        for path in sorted({p for p, _ in REGIONAL_RULES.values()}):
            try:
                parse_config(_moved(path, region), "f.yaml")
                problems: list[str] = []
            except ConfigError as error:
                problems = error.problems
            for resource_type, (rule_path, field) in REGIONAL_RULES.items():
                if rule_path != path:
                    continue
                refused = any(p.startswith(f"f.yaml: {field}: ") and f"({resource_type})" in p for p in problems)
                if refused != (resource_type not in types):
                    out.append(f"{resource_type} in {region}: validate {'refuses' if refused else 'accepts'} {path}")
    return out


def test_validate_refuses_every_regional_rule_exactly_where_the_gate_would() -> None:
    assert _rule_disagreements() == []


def test_the_rule_test_catches_a_validate_that_only_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old behaviour: a cluster policy where cfn-lint's list lacks the type passed validate (a warning)."""
    import fminfra.config.environment as environment

    real = environment.resource_types_in
    monkeypatch.setattr(environment, "resource_types_in", lambda r: (real(r) or set()) | {"AWS::SageMaker::ClusterSchedulerConfig"})
    found = _rule_disagreements()
    assert "AWS::SageMaker::ClusterSchedulerConfig in us-west-2: validate accepts tests/configs/capacity-eks.yaml" in found
    assert all(line.startswith("AWS::SageMaker::ClusterSchedulerConfig in ") for line in found)


def test_every_type_some_region_lacks_has_a_regional_rule() -> None:
    """Every resource type fminfra names (SERVICE_NAMES) or the shipped templates hold, that cfn-lint's list
    lacks in some region fminfra accepts, has a rule above (or goes with one that lacks it in every such region)."""
    from fminfra.core.regional import SERVICE_NAMES
    from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION

    created = set(SERVICE_NAMES)
    for template in (ROOT / "tests" / "app" / "__snapshots__" / "test_snapshots").glob("*.json"):
        created |= {r["Type"] for r in json.loads(template.read_text()).get("Resources", {}).values() if "Type" in r}
    lists = {r: t for r in AZ_ID_PREFIX_BY_REGION if (t := _cfn_lint_types(r)) is not None}
    lacking = {t: {r for r, types in lists.items() if t not in types} for t in created if not t.startswith("Custom::")}
    uncovered = sorted(t for t, regions in lacking.items() if regions and t not in REGIONAL_RULES and t not in GOES_WITH)
    assert uncovered == []
    for t, other in GOES_WITH.items():
        assert lacking[t] <= lacking[other], t


# B1: validate and the CDK's own template validator (run by every `cdk synth`) on HyperPod types.
@pytest.fixture(scope="module")
def plugin() -> dict[str, Any]:
    """The plugin's verdicts, computed now from the installed aws-cdk-lib's bundled validator."""
    from tests.core.cdk_validate_data import build

    return build()


def test_the_shipped_cdk_validate_data_is_what_the_installed_plugin_says(plugin: dict[str, Any]) -> None:
    """Fails after an aws-cdk-lib bump until `python -m tests.core.cdk_validate_data` is run and reviewed."""
    from fminfra.core.regional import CDK_VALIDATE_DATA

    assert json.loads(CDK_VALIDATE_DATA.read_text()) == plugin


def _hyperpod_disagreements(refused: dict[str, list[str]]) -> list[str]:
    """For every HyperPod type of the catalog in every region fminfra accepts: the plugin refuses it (its own
    data, `refused`) only where validate refuses it first or fminfra acknowledges the finding with cfn-lint's
    list offering it; fminfra acknowledges nothing the plugin accepts."""
    from fminfra.catalog import CATALOG, capacity_types
    from fminfra.core.regional import cdk_validate_acknowledged, hyperpod_types_in
    from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION
    from fminfra.hyperpod.rules import hyperpod_instance_types

    types = sorted(t.hyperpod_name for t in CATALOG.values() if t.hyperpod_name in hyperpod_instance_types())
    out = []
    for region in AZ_ID_PREFIX_BY_REGION:
        for name in types:
            data = _moved("config/dev.yaml", region)
            group = data["compute"]["instance_groups"][0]
            group["instance_type"] = name
            if "on-demand" not in (capacity_types(name[3:]) or ("on-demand",)):  # p6e-gb200: training plans
                arn = f"arn:aws:sagemaker:{region}:{data['account']}:training-plan/plan"
                group["capacity"] = {"type": "training-plan", "training_plan_arn": arn}
            try:
                parse_config(data, "f.yaml")
                problems: list[str] = []
            except ConfigError as error:
                problems = error.problems
            validate_refuses = any(
                p.startswith("f.yaml: compute.instance_groups[0].instance_type: ") or "(AWS::SageMaker::Cluster)" in p for p in problems
            )
            acknowledged = name in cdk_validate_acknowledged(region, [name])
            plugin_refuses = name in refused.get(region, [])
            if plugin_refuses and not (validate_refuses or acknowledged):
                out.append(f"{name} in {region}: validate accepts, the CDK validator refuses, nothing acknowledges it")
            if acknowledged and (not plugin_refuses or name not in (hyperpod_types_in(region) or set())):
                out.append(f"{name} in {region}: acknowledged without the plugin refusing it and cfn-lint offering it")
    return out


def test_validate_and_the_cdk_validator_agree_on_every_hyperpod_type_and_region(plugin: dict[str, Any]) -> None:
    assert _hyperpod_disagreements(plugin["refused_hyperpod_types"]) == []


def test_the_agreement_test_catches_a_validate_that_skips_unlisted_types(plugin: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The old behaviour: a type in no region's cfn-lint list (ml.p5e.48xlarge) was never judged."""
    import fminfra.config.environment as environment

    monkeypatch.setattr(environment, "cdk_validate_refuses", lambda region, name: False)
    found = _hyperpod_disagreements(plugin["refused_hyperpod_types"])
    assert "ml.p5e.48xlarge in us-east-1: validate accepts, the CDK validator refuses, nothing acknowledges it" in found
    # and an acknowledgment where cfn-lint does not offer the type is caught
    broken = {**plugin["refused_hyperpod_types"], "us-east-1": []}
    assert "ml.p6-b200.48xlarge in us-east-1: acknowledged without the plugin refusing it and cfn-lint offering it" in (
        _hyperpod_disagreements(broken)
    )


def test_p5e_in_us_east_1_is_one_line() -> None:
    data = _moved("config/dev.yaml", "us-east-1")
    data["compute"]["instance_groups"][0]["instance_type"] = "ml.p5e.48xlarge"
    (line,) = _problems(data)
    assert line.startswith(
        "f.yaml: compute.instance_groups[0].instance_type: ml.p5e.48xlarge is in no region's HyperPod list and the CDK's own "
        "template validation (run by cdk synth) refuses it in us-east-1; GPU types offered there: "
    )


def test_cdk_synth_passes_where_cfn_lint_offers_what_the_cdk_validator_refuses(cli_synth_elsewhere: CliSynth) -> None:
    """ml.p4d.24xlarge in eu-west-2: cfn-lint's list offers it, the CDK validator refuses it (E3644); the
    acknowledgment lets `cdk synth` through, with cfn-lint's list as its reason."""
    data = cli_synth_elsewhere.data
    assert (data["region"], data["compute"]["instance_groups"][0]["instance_type"]) == ("eu-west-2", "ml.p4d.24xlarge")
    parse_config(data, str(cli_synth_elsewhere.config))
    result = cli_synth_elsewhere.result
    assert result.returncode == 0, result.stderr[-3000:]
    assert "E3644" not in result.stderr
