"""`plan`'s pod IPs: what the VPC CNI takes from which subnets for each Karpenter pool or EKS managed
inference node group at its maximum (docs/compute.md#pod-ip-addresses, docs/facts/eks.md#vpc-cni-eni-limits)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import moto
import pytest

from fminfra import catalog
from fminfra.cli.main import main
from fminfra.config import parse_config, read_yaml
from fminfra.network.rules import VPC_CNI_ENI_LIMITS, usable_addresses, vpc_cni_max_pods, vpc_cni_node_addresses
from fminfra.ops.plan import plan_warnings, pod_ip_plans, render_plan

ROOT = Path(__file__).resolve().parents[2]
KARPENTER = read_yaml(ROOT / "tests" / "configs" / "eks-karpenter.yaml")


def _karpenter(**group: Any) -> dict[str, Any]:
    data = copy.deepcopy(KARPENTER)
    data["compute"]["inference_node_groups"][0].update(group)
    return data


def _pod_ip_warnings(data: dict[str, Any]) -> list[str]:
    return [w for w in plan_warnings(parse_config(data, "f.yaml")) if "VPC CNI" in w or "pod IPs" in w or "together" in w]


def test_a_karpenter_pool_takes_its_addresses_from_every_private_subnet() -> None:
    cfg = parse_config(KARPENTER, "f.yaml")
    plans = {p.name: p for p in pod_ip_plans(cfg)}
    g6e = plans["serve-g6e"]
    # g6e.12xlarge: 10 ENIs x 30 addresses; two ENIs (pods on one, one warm) to all ten (292 pods)
    assert (g6e.kind, g6e.nodes, g6e.max_pods, g6e.per_node, g6e.total) == ("karpenter pool", 4, 292, (60, 300), (240, 1200))
    assert [(s.name, s.cidr) for s in g6e.subnets] == [("Private-usw2-az2", "10.7.0.0/18"), ("Private-usw2-az1", "10.7.64.0/20")]
    # p5.48xlarge: card 0 has 2 ENIs of 50; Karpenter's `efa` interfaces on the other 31 cards take one each
    assert plans["serve-p5"].per_node == (100, 131)
    text = render_plan(cfg)
    assert "pod IPs (VPC CNI defaults: WARM_ENI_TARGET=1, no prefix delegation, network card 0;" in text
    row = next(line for line in text.splitlines() if line.startswith("serve-g6e") and "karpenter pool" in line)
    assert row.split()[:9] == ["serve-g6e", "karpenter", "pool", "g6e.12xlarge", "4", "292", "60-300", "240-1,200", "Private-usw2-az2"]
    assert "Private-usw2-az1 10.7.64.0/20 (4,091 usable)" in row
    assert _pod_ip_warnings(KARPENTER) == []


def test_a_managed_node_group_takes_its_addresses_from_the_compute_subnet() -> None:
    data = copy.deepcopy(KARPENTER)
    del data["compute"]["eks"]["karpenter"]
    data["compute"]["inference_node_groups"] = [data["compute"]["inference_node_groups"][0]]
    (plan,) = pod_ip_plans(parse_config(data, "f.yaml"))
    assert plan.kind == "node group"
    assert [s.name for s in plan.subnets] == ["Private-usw2-az2"]
    assert plan.total == (240, 1200)  # no EFA interfaces with addresses: a G type


def test_plan_warns_when_a_pool_at_its_maximum_takes_over_half_a_subnet() -> None:
    # 7 x 300 = 2,100 addresses: more than half the /20's 4,091, not of the /18's 16,379
    (warning,) = _pod_ip_warnings(_karpenter(max_size=7))
    assert warning.startswith(
        "WARN serve-g6e: at its maximum (7 x g6e.12xlarge) the VPC CNI can take up to 2,100 addresses, more than 50% of the 4,091 "
        "usable in Private-usw2-az1 (10.7.64.0/20), where all its nodes can land"
    )
    assert _pod_ip_warnings(_karpenter(max_size=6)) == []  # 1,800


def test_plan_warns_when_pools_together_could_fill_a_subnet() -> None:
    # serve-g6e 12 x 300 = 3,600 (not over half the /18's 16,379); serve-p5 at 100 x 131 = 13,100: together past the /18
    data = _karpenter(max_size=12)
    data["compute"]["inference_node_groups"][1]["max_size"] = 100
    warnings = _pod_ip_warnings(data)
    assert (
        "WARN Private-usw2-az2 (10.7.0.0/18): serve-g6e, serve-p5 together at their maximum can take up to 16,700 addresses, "
        "more than its 16,379 usable (docs/compute.md#pod-ip-addresses)"
    ) in warnings
    assert not [w for w in _pod_ip_warnings(_karpenter(max_size=12)) if "together" in w]


def test_plan_prints_pod_ips_and_warns_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(_karpenter(max_size=60)))
    assert main(["plan", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "18,000" in out
    assert "WARN serve-g6e: at its maximum (60 x g6e.12xlarge) the VPC CNI can take up to 18,000 addresses" in err
    assert "Private-usw2-az2 (10.7.0.0/18)" in err  # more than half of the /18 too


def test_a_type_without_recorded_limits_is_unknown_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(VPC_CNI_ENI_LIMITS, "g6e.12xlarge")
    cfg = parse_config(KARPENTER, "f.yaml")
    plan = next(p for p in pod_ip_plans(cfg) if p.name == "serve-g6e")
    assert (plan.per_node, plan.max_pods, plan.total) == (None, None, None)
    assert "unknown" in render_plan(cfg)
    assert any(w.startswith("WARN serve-g6e: pod IPs unknown: no VPC CNI limits recorded for g6e.12xlarge") for w in plan_warnings(cfg))


def _published_instance_types() -> dict[str, Any]:
    """EC2 DescribeInstanceTypes as moto (pinned in requirements-dev.txt) records it."""
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    return dict(json.loads(gzip.decompress(path.read_bytes())))


def test_the_vpc_cni_limits_are_what_ec2_publishes_for_every_catalog_type() -> None:
    published = _published_instance_types()
    for name, (enis, per_eni) in VPC_CNI_ENI_LIMITS.items():
        info = published[name]["NetworkInfo"]
        card = info.get("DefaultNetworkCardIndex", 0)
        assert enis == info["NetworkCards"][card]["MaximumNetworkInterfaces"], name  # card 0 only: the CNI's default
        assert per_eni == info["Ipv4AddressesPerInterface"], name
    # every verified catalog type has limits; the unverified UltraServer node has none (plan says unknown)
    assert sorted(set(catalog.CATALOG) - set(VPC_CNI_ENI_LIMITS)) == ["p6e-gb200.36xlarge"]


def test_max_pods_is_the_vpc_cni_table_formula() -> None:
    # misc/eni-max-pods.txt at aws/amazon-vpc-cni-k8s v1.21.1
    assert {t: vpc_cni_max_pods(t) for t in ("g5.xlarge", "g6e.12xlarge", "g6e.48xlarge", "p5.48xlarge", "p5en.48xlarge")} == {
        "g5.xlarge": 58,
        "g6e.12xlarge": 292,
        "g6e.48xlarge": 492,
        "p5.48xlarge": 100,
        "p5en.48xlarge": 198,
    }
    assert vpc_cni_node_addresses("g5.xlarge") == (30, 60)
    assert usable_addresses("10.7.64.0/20") == 4091


def test_fminfra_leaves_the_vpc_cni_at_its_defaults() -> None:
    """The figures assume the CNI's defaults (docs/facts/eks.md#vpc-cni-warm-eni-target): fminfra configures no vpc-cni add-on."""
    from fminfra.compute.stack.clusters import HYPERPOD_ADDON_CONFIGURATIONS

    assert "vpc-cni" not in HYPERPOD_ADDON_CONFIGURATIONS
