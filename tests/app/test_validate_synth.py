"""validate => synth (issue 34): every config that `fminfra validate` accepts synthesizes.

A property-based test (hypothesis) over configs generated from the shipped ones (config/, examples/,
tests/configs/), mutated field by field: region and AZ IDs (the regions of fminfra's sourced regional
data), orchestrator, catalog instance types, capacity types and their fields, counts, placement,
the Slurm nodes, EKS, storage and observability. A config `validate` refuses is skipped; one it accepts
goes through the same synth as `cdk synth` (the app of `fminfra.app.synth.build_app` with cdk.json's
context, so aws-cdk-lib's default CloudFormation validation plugin and cdk-nag run): any error there
(ValidationError, a jsii error, a validation plugin's report) is a bug in `validate`.

Each synth costs about a second or two after the first, so `make test` runs a few examples, derandomized
(the same ones every run). A long exploration, random each run: `FMINFRA_SYNTH_EXAMPLES=100` (docs/testing.md).
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fminfra.app.synth import build_app
from fminfra.capacity.rules import CAPACITY_TYPES, EC2_CAPACITY_TYPES, HYPERPOD_CAPACITY_TYPES
from fminfra.catalog import CATALOG, TRAINING_TYPES
from fminfra.compute.config import supported_kubernetes_versions
from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from fminfra.core.regional import hyperpod_types_in, resource_types_in
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION, AZ_IDS_BY_REGION
from tests.conftest import ALL_CONFIGS, ROOT

CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
BASES: dict[str, dict[str, Any]] = {p.name: yaml.safe_load(p.read_text()) for p in ALL_CONFIGS}
# The regions fminfra's regional data (cfn-lint's per-region lists) and AZ table both know.
REGIONS = sorted(r for r in AZ_ID_PREFIX_BY_REGION if resource_types_in(r) is not None)
KUBERNETES_VERSIONS = sorted(supported_kubernetes_versions())
INFERENCE_TYPES = sorted(CATALOG)
CAPACITY = list(CAPACITY_TYPES)
CPU_HYPERPOD_TYPES = ["ml.m5.4xlarge", "ml.m5.12xlarge", "ml.c5.4xlarge", "ml.t3.medium", "ml.m6i.8xlarge", "ml.c6i.4xlarge"]
# 2026-12-02 is "today" for these configs' dates; blocks start at 11:30 UTC.
FUTURE = datetime(2027, 1, 4, 11, 30, tzinfo=UTC)

EXPLORE = os.environ.get("FMINFRA_SYNTH_EXAMPLES")
PROPERTY = settings(
    max_examples=int(EXPLORE or "6"),
    derandomize=not EXPLORE,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


def _az_ids(region: str) -> list[str]:
    known = AZ_IDS_BY_REGION[region]
    return list(known) if known else [f"{AZ_ID_PREFIX_BY_REGION[region]}-az{n}" for n in (1, 2, 3)]


def _partition(region: str) -> str:
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def _hex17(draw: st.DrawFn) -> str:
    return "cr-" + draw(st.text(alphabet="0123456789abcdef", min_size=17, max_size=17))


@st.composite
def _capacity(draw: st.DrawFn, data: dict[str, Any], hyperpod: bool) -> dict[str, Any]:
    """Mostly a type the group may take (validate's own sets), sometimes any."""
    allowed = HYPERPOD_CAPACITY_TYPES if hyperpod else EC2_CAPACITY_TYPES
    kind = draw(st.one_of(st.sampled_from(allowed), st.sampled_from(allowed), st.sampled_from(CAPACITY)))
    out: dict[str, Any] = {"type": kind}
    if kind == "odcr" and draw(st.booleans()):
        out["end_date"] = (FUTURE + timedelta(days=draw(st.integers(1, 400)))).isoformat().replace("+00:00", "Z")
    elif kind in ("reservation", "capacity-block"):
        out["reservation_ids"] = sorted({_hex17(draw) for _ in range(draw(st.integers(1, 2)))})
        if kind == "capacity-block" and draw(st.booleans()):
            start = FUTURE + timedelta(days=draw(st.integers(0, 300)))
            out["starts_at"] = start.isoformat().replace("+00:00", "Z")
            out["ends_at"] = (start + timedelta(days=draw(st.sampled_from([1, 2, 7, 14, 28])))).isoformat().replace("+00:00", "Z")
    elif kind == "training-plan":
        name = draw(st.sampled_from(["plan", "fminfra-p5", "p5en-two"]))
        out["training_plan_arn"] = f"arn:{_partition(data['region'])}:sagemaker:{data['region']}:{data['account']}:training-plan/{name}"
        if draw(st.booleans()):
            out["drain_minutes"] = draw(st.integers(0, 60))
    return out


@st.composite
def _training_group(draw: st.DrawFn, data: dict[str, Any], index: int, orchestrator: str) -> dict[str, Any]:
    hyperpod = orchestrator in ("slurm", "eks")
    instance_type = draw(st.sampled_from(TRAINING_TYPES))
    if hyperpod and draw(st.booleans()):
        instance_type = f"ml.{instance_type}"
    group: dict[str, Any] = {
        "name": f"g{index}",
        "instance_type": instance_type,
        "count": draw(st.one_of(st.integers(0, 8), st.sampled_from([64, 500]))),
    }
    if draw(st.booleans()):
        group["threads_per_core"] = draw(st.sampled_from([1, 2]))
    if orchestrator == "ec2":
        if draw(st.booleans()):
            group["placement"] = draw(st.sampled_from(["cluster", "none"]))
        if draw(st.booleans()):
            group["root_volume_gib"] = draw(st.sampled_from([8, 200, 500, 1000]))
    elif hyperpod:
        if draw(st.booleans()):
            group["instance_storage_gib"] = draw(st.sampled_from([1, 500, 2000]))
        if draw(st.booleans()):
            group["deep_health_checks"] = draw(st.sampled_from([[], ["instance_stress"], ["instance_stress", "instance_connectivity"]]))
    if draw(st.booleans()):
        group["capacity"] = draw(_capacity(data, hyperpod))
    return group


@st.composite
def _inference_group(draw: st.DrawFn, data: dict[str, Any], index: int) -> dict[str, Any]:
    max_size = draw(st.integers(1, 4))
    desired = draw(st.integers(0, max_size))
    group: dict[str, Any] = {
        "name": f"serve{index}",
        "instance_type": draw(st.sampled_from(INFERENCE_TYPES)),
        "min_size": draw(st.integers(0, desired)),
        "desired_size": desired,
        "max_size": max_size,
        "placement": draw(st.sampled_from(["cluster", "none"])),
    }
    if draw(st.booleans()):
        group["capacity"] = draw(_capacity(data, hyperpod=False))
    if draw(st.booleans()):
        effect = draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))
        group["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": effect}]
    if draw(st.booleans()):
        group["labels"] = {"workload": "inference"}
    if draw(st.booleans()):
        group["root_volume_gib"] = draw(st.sampled_from([20, 200, 1000]))
    return group


@st.composite
def _scheduling(draw: st.DrawFn, groups: list[dict[str, Any]], governed: bool) -> dict[str, Any]:
    """Task governance (HyperPod EKS: teams over the training groups, priority classes) or Kueue
    (EKS without HyperPod: teams over the inference groups)."""
    out: dict[str, Any] = {"task_governance": True} if governed else {"kueue": draw(st.booleans())}
    if groups and draw(st.booleans()):
        out["teams"] = [
            {"name": name, "instances": {g["name"]: draw(st.integers(1, 2)) for g in groups[: draw(st.integers(1, len(groups)))]}}
            for name in draw(st.sampled_from([["research"], ["research", "eval"]]))
        ]
    if governed and draw(st.booleans()):
        out["priority_classes"] = draw(st.sampled_from([{"training": 50}, {"training": 50, "inference": 90}]))
    return out


@st.composite
def _lustre(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"deployment_type": "scratch_2", "storage_capacity_gib": draw(st.sampled_from([1200, 2400, 4800]))}
    lustre: dict[str, Any] = {"deployment_type": "persistent_2", "throughput_mb_per_tib": draw(st.sampled_from([125, 250, 500, 1000]))}
    if draw(st.booleans()):
        lustre["storage_capacity_gib"] = draw(st.sampled_from([1200, 2400, 4800, 9600, 48000]))
    else:
        lustre["target_throughput_gb_per_s"] = draw(st.sampled_from([1, 5, 12.5, 40]))
    lustre["efa"] = draw(st.booleans())
    lustre["compression"] = draw(st.sampled_from(["lz4", "none"]))
    lustre["backup_retention_days"] = draw(st.sampled_from([0, 7]))
    lustre["metadata"] = draw(
        st.sampled_from([{"mode": "automatic"}, *({"mode": "user_provisioned", "iops": i} for i in (1500, 3000, 12000, 24000, 192000))])
    )
    repositories = [
        {"s3_prefix": "datasets/", "file_system_path": "/datasets", "import": ["new", "changed"], "export": []},
        {"s3_prefix": "checkpoints/", "file_system_path": "/checkpoints", "import": ["new"], "export": ["new", "changed", "deleted"]},
    ]
    lustre["repositories"] = repositories[: draw(st.integers(0, 2))]
    return lustre


@st.composite
def generated_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A shipped config, mutated: each field group is kept as shipped or redrawn."""
    data = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    keep = st.booleans()
    compute = data.setdefault("compute", {})

    if not draw(keep):
        data["region"] = draw(st.sampled_from(REGIONS))
        azs = draw(st.lists(st.sampled_from(_az_ids(data["region"])), min_size=1, max_size=4, unique=True))
        data["network"] = {**data.get("network", {}), "az_ids": azs, "compute_az_id": draw(st.sampled_from(azs))}
        for group in compute.get("instance_groups", []) + compute.get("inference_node_groups", []):
            if (group.get("capacity") or {}).get("type") == "training-plan":
                group["capacity"] = draw(_capacity(data, hyperpod=compute.get("orchestrator") in ("slurm", "eks")))
    if not draw(keep):
        data["network"]["nat_gateways"] = draw(st.sampled_from(["one", "per-az"]))
        data["network"]["cidr"] = draw(st.sampled_from(["10.0.0.0/16", "172.16.0.0/16", "192.168.0.0/16", "10.20.0.0/20", "10.30.0.0/22"]))
        for key, prefixes in (
            ("compute_subnet_prefix", [18, 20, 24]),
            ("private_subnet_prefix", [20, 24, 27]),
            ("public_subnet_prefix", [26, 28]),
        ):
            if draw(st.booleans()):
                data["network"][key] = draw(st.sampled_from(prefixes))
    if not draw(keep):
        data["removal_policy"] = draw(st.sampled_from(["retain", "destroy"]))
        data["tags"] = draw(st.sampled_from([{}, {"team": "ml"}, {"cost-center": "1234", "owner": "a@example.com"}]))
    if not draw(keep):
        orchestrator = draw(st.sampled_from(["ec2", "slurm", "eks", "none"]))
        compute["orchestrator"] = orchestrator
        for section in ("slurm", "eks"):
            if section != orchestrator:
                compute.pop(section, None)
        compute["instance_groups"] = [] if orchestrator == "none" else [draw(_training_group(data, 0, orchestrator))]
    orchestrator = compute.get("orchestrator", "none")
    if orchestrator != "none" and not draw(keep):
        groups = draw(st.integers(1, 3))
        compute["instance_groups"] = [draw(_training_group(data, i, orchestrator)) for i in range(groups)]
    if orchestrator == "slurm" and not draw(keep):
        compute["slurm"] = {
            "controller": {"instance_type": draw(st.sampled_from(CPU_HYPERPOD_TYPES))},
            "login": {"instance_type": draw(st.sampled_from(CPU_HYPERPOD_TYPES)), "count": draw(st.integers(0, 2))},
        }
    if not draw(keep):
        compute["inference_node_groups"] = [draw(_inference_group(data, i)) for i in range(draw(st.integers(0, 2)))]
    if (orchestrator == "eks" or compute.get("inference_node_groups")) and not draw(keep):
        eks = compute.setdefault("eks", {})
        eks["kubernetes_version"] = draw(st.sampled_from(KUBERNETES_VERSIONS))
        eks["public_access_cidrs"] = draw(st.sampled_from([[], ["203.0.113.0/24"]]))
        if draw(st.booleans()):
            eks["system_nodes"] = {
                "count": draw(st.sampled_from([None, 0, 2])),
                "instance_type": draw(st.sampled_from(["m6i.large", "m7i.xlarge"])),
            }
        eks.pop("scheduling", None)  # teams name groups the mutation may have replaced
        if orchestrator == "eks" and draw(st.booleans()):
            eks["scheduling"] = draw(_scheduling(compute["instance_groups"], governed=True))
        elif orchestrator != "eks":
            eks.pop("accept_access", None)
            if draw(st.booleans()):
                eks["scheduling"] = draw(_scheduling(compute["inference_node_groups"], governed=False))
    if not draw(keep):
        storage = draw(st.sampled_from(["none", "bucket", "lustre"]))
        data.pop("storage", None)
        if storage != "none":
            data["storage"] = {"encryption": draw(st.sampled_from(["kms", "s3"]))}
            if draw(st.booleans()):
                data["storage"]["bucket"] = draw(
                    st.sampled_from(
                        [
                            {"existing": True, "name": "team-datasets-example"},
                            {"read_only_prefixes": [], "read_write_prefixes": ["checkpoints/", "logs/"]},
                            {"read_only_prefixes": ["datasets/", "models/"]},
                        ]
                    )
                )
            if storage == "lustre":
                data["storage"]["lustre"] = draw(_lustre())
    if not draw(keep):
        prometheus = draw(st.booleans())
        data["observability"] = {
            "prometheus": prometheus,
            "grafana": {"enabled": prometheus and draw(st.booleans())},
            "alerts": {
                "emails": draw(st.sampled_from([[], ["oncall@example.com"]])),
                **(
                    {"sns_topic_arn": f"arn:{_partition(data['region'])}:sns:{data['region']}:{data['account']}:alerts"}
                    if draw(st.booleans())
                    else {}
                ),
            },
            "scrape_interval_seconds": draw(st.sampled_from([30, 60, 300])),
        }
    return data


def synth_problem(data: dict[str, Any]) -> str | None:
    """None when the config synthesizes as `cdk synth` would; else what failed, in one string."""
    cfg = parse_config(copy.deepcopy(data), "generated.yaml")
    with tempfile.TemporaryDirectory() as outdir:
        app = cdk.App(outdir=outdir, context=CONTEXT)
        try:
            build_app([cfg], app=app)
            app.synth()
        except Exception as exc:
            # a validation plugin's failure names its report, which the temporary folder loses
            report = Path(outdir, "validation-report.json")
            details = report.read_text()[:6000] if report.is_file() else ""
            return f"{type(exc).__name__}: {exc}\n{details}"
    return None


def check_validate_implies_synth(data: dict[str, Any]) -> bool:
    """The property: a config `validate` refuses is skipped (False); one it accepts must synthesize (True)."""
    try:
        parse_config(copy.deepcopy(data), "generated.yaml")
    except ConfigError:
        return False
    problem = synth_problem(data)
    assert problem is None, f"validate accepts this config, synth fails:\n{yaml.safe_dump(data, sort_keys=False)}\n{problem[:4000]}"
    return True


def _accepted(data: dict[str, Any]) -> dict[str, Any]:
    parse_config(copy.deepcopy(data), "generated.yaml")  # raises when validate refuses it
    return data


@PROPERTY
@given(generated_configs())
def test_every_config_validate_accepts_synthesizes(data: dict[str, Any]) -> None:
    assume(check_validate_implies_synth(data))


def test_the_generator_reaches_every_orchestrator_and_capacity_type() -> None:
    """The strategy is not stuck on the shipped configs: drawn without synth, accepted configs
    cover every orchestrator and capacity type, and several regions."""
    seen: dict[str, set[str]] = {"orchestrator": set(), "capacity": set(), "region": set()}

    @settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(generated_configs())
    def collect(data: dict[str, Any]) -> None:
        try:
            parse_config(copy.deepcopy(data), "generated.yaml")
        except ConfigError:
            return
        compute = data.get("compute", {})
        seen["orchestrator"].add(compute.get("orchestrator", "none"))
        seen["region"].add(data["region"])
        for group in compute.get("instance_groups", []) + compute.get("inference_node_groups", []):
            seen["capacity"].add((group.get("capacity") or {}).get("type", "on-demand"))

    collect()
    assert seen["orchestrator"] == {"ec2", "slurm", "eks", "none"}, seen
    assert seen["capacity"] == set(CAPACITY), seen
    assert len(seen["region"]) >= 5, seen


def test_a_broken_validate_lets_through_a_config_synth_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test of the test: with validate's rule on HyperPod types the CDK's own template validation
    refuses (fminfra/config/environment.py) taken away, ml.p5e.48xlarge on HyperPod in us-east-1
    validates, and synth (aws-cdk-lib's CloudFormation validation plugin, E3644) fails the property."""
    data = copy.deepcopy(BASES["prod.yaml"])
    data["compute"]["instance_groups"][0].update(instance_type="ml.p5e.48xlarge", capacity={"type": "on-demand"})
    with pytest.raises(ConfigError, match="CDK's own template validation"):
        parse_config(copy.deepcopy(data), "generated.yaml")
    monkeypatch.setattr("fminfra.config.environment.cdk_validate_refuses", lambda region, name: False)
    with pytest.raises(AssertionError, match="E3644"):
        check_validate_implies_synth(_accepted(data))
    assert "ml.p5e.48xlarge" not in (hyperpod_types_in("us-east-1") or set())


# Configs explorations found that validate accepted and synth refused: each a regression test.


def test_hyperpod_eks_training_plan_without_charts_synthesizes() -> None:
    """Found 2026-12-02: HyperPod EKS with a training-plan group (so the plan drain, whose RBAC is
    an `eks.KubernetesManifest`), no inference node groups and prometheus off (so no Helm chart):
    the EKS cluster had no kubectl provider and synth failed with "Kubectl Provider is not defined
    in this cluster". Fixed in fminfra/eks/constructs/cluster.py (`kubectl_manifests`)."""
    data = copy.deepcopy(BASES["hp-slurm-two-gpu-groups.yaml"])
    data["compute"]["orchestrator"] = "eks"
    del data["compute"]["slurm"]
    data["observability"] = {"prometheus": False}
    assert check_validate_implies_synth(data)


def _observability_only_existing_topic() -> dict[str, Any]:
    data = copy.deepcopy(BASES["ec2-odcr.yaml"])
    data["observability"] = {"prometheus": False, "alerts": {"sns_topic_arn": f"arn:aws:sns:us-east-2:{data['account']}:alerts"}}
    return data


def test_an_observability_stack_without_resources_is_refused() -> None:
    """Found 2026-12-02: prometheus off, an existing alert topic (imported, not created), no alert
    emails and no file system: validate said ok, and synth failed on the empty Observability stack
    (CloudFormation Validate F0001, "Resources section must exist and be non-empty"). validate now
    refuses it in one line; with an email subscription the stack holds a resource and synthesizes."""
    data = _observability_only_existing_topic()
    with pytest.raises(ConfigError) as refused:
        parse_config(copy.deepcopy(data), "generated.yaml")
    assert refused.value.problems == [
        "generated.yaml: observability.alerts.sns_topic_arn: with prometheus: false, no alerts.emails and no storage.lustre, "
        "the Observability stack would have no resource (CloudFormation refuses an empty template); set prometheus: true, "
        "add alerts.emails or leave sns_topic_arn out"
    ]
    data["observability"]["alerts"]["emails"] = ["oncall@example.com"]
    assert check_validate_implies_synth(data)


def test_the_empty_observability_stack_fails_synth(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the rule above guards against, shown with the rule taken away: the property fails."""
    monkeypatch.setattr("fminfra.config.environment.empty_stack_problem", lambda **_: None)
    with pytest.raises(AssertionError, match="F0001"):
        check_validate_implies_synth(_observability_only_existing_topic())
