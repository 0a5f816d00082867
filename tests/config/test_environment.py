"""The config model and its messages, no synth."""

from __future__ import annotations

import copy
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.config import load_config, parse_config
from fminfra.core.errors import ConfigError
from tests.conftest import ALL_CONFIGS, ROOT

DEV = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
EC2 = yaml.safe_load((ROOT / "examples" / "ec2-odcr.yaml").read_text())
STAGING = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of base with one field (dotted path, integer list indexes) set; `...` deletes it."""
    data = copy.deepcopy(base)
    parts = path.split(".")
    node: Any = data
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    if value is ...:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return info.value.problems


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_configs_are_valid(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.network.compute_az_id in cfg.network.az_ids


BAD_CASES = [
    # (base, field, value, exact expected message)
    (
        DEV,
        "netwrok",
        {},
        "f.yaml: netwrok: unknown field (allowed here: version, name, account, region, tags, removal_policy, network, compute, storage, observability, serving)",
    ),
    (
        DEV,
        "network.compute_az_id",
        "usw2-az3",
        "f.yaml: network.compute_az_id: 'usw2-az3' is not one of az_ids (usw2-az1, usw2-az2, usw2-az4)",
    ),
    (
        DEV,
        "network.az_ids",
        ["euw1-az1", "euw1-az2"],
        "f.yaml: network.compute_az_id: 'usw2-az4' is not one of az_ids (euw1-az1, euw1-az2); az_ids are AZ IDs of eu-west-1, "
        "compute_az_id of us-west-2: list the AZ IDs of the environment's region",
    ),
    (
        DEV,
        "network.az_ids",
        ["usw2-az1", "use1-az2", "usw2-az4"],
        "f.yaml: network.az_ids[1]: 'use1-az2' belongs to us-east-1, not us-west-2 (its AZ IDs start with usw2-)",
    ),
    (DEV, "network.az_ids", ["usw2-az1", "usw2-az1", "usw2-az4"], "f.yaml: network.az_ids: AZ IDs must be unique, repeated: usw2-az1"),
    (
        DEV,
        "network.az_ids",
        ["us-west-2a", "usw2-az4"],
        "f.yaml: network.az_ids[0]: 'us-west-2a' is an AZ name, which maps to a different zone in every account; give the AZ ID, "
        "e.g. usw2-az1 (list this account's: aws ec2 describe-availability-zones --region us-west-2 "
        "--query 'AvailabilityZones[].[ZoneName,ZoneId]' --output text)",
    ),
    (DEV, "network.az_ids", ["uswest2-x", "usw2-az4"], "f.yaml: network.az_ids[0]: 'uswest2-x' is not an AZ ID such as usw2-az1"),
    (
        DEV,
        "compute.instance_groups.0.instance_type",
        "p5.48xlarg",
        "f.yaml: compute.instance_groups[0].instance_type: 'p5.48xlarg' is not in the GPU catalog; allowed: p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge",
    ),
    (
        DEV,
        "compute.instance_groups.0.instance_type",
        "g6e.12xlarge",
        "f.yaml: compute.instance_groups[0].instance_type: 'g6e.12xlarge' is not an EFA training type; allowed: p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, p6e-gb200.36xlarge",
    ),
    (
        DEV,
        "compute.instance_groups.0.count",
        -1,
        "f.yaml: compute.instance_groups[0].count: Input should be greater than or equal to 0, got -1",
    ),
    (
        DEV,
        "compute.instance_groups.0.name",
        "bad_name",
        "f.yaml: compute.instance_groups[0].name: must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit, got 'bad_name'",
    ),
    (
        DEV,
        "compute.instance_groups.0.name",
        "controller",
        "f.yaml: compute.instance_groups[0].name: 'controller' is the Slurm controller group's name; choose another",
    ),
    (
        DEV,
        "compute.orchestrator",
        "kubernetes",
        "f.yaml: compute.orchestrator: Input should be 'slurm', 'eks', 'ec2' or 'none', got 'kubernetes'",
    ),
    (DEV, "name", "Dev_1", "f.yaml: name: must be 1-16 lowercase letters, digits and hyphens, starting with a letter, got 'Dev_1'"),
    (DEV, "account", 111111111111, "f.yaml: account: must be a quoted string of 12 digits (YAML reads an unquoted number as an integer)"),
    (
        DEV,
        "region",
        "us-west-9",
        "f.yaml: region: unknown region 'us-west-9'; known: us-east-1, us-east-2, us-west-1, us-west-2, ca-central-1, ca-west-1, mx-central-1, sa-east-1, eu-west-1, eu-west-2, eu-west-3, eu-central-1, eu-central-2, eu-north-1, eu-south-1, eu-south-2, ap-east-1, ap-east-2, ap-northeast-1, ap-northeast-2, ap-northeast-3, ap-southeast-1, ap-southeast-2, ap-southeast-3, ap-southeast-4, ap-southeast-5, ap-southeast-6, ap-southeast-7, ap-south-1, ap-south-2, me-south-1, me-central-1, il-central-1, af-south-1, us-gov-west-1, us-gov-east-1, cn-north-1, cn-northwest-1",
    ),
    (
        DEV,
        "network.cidr",
        "10.0.0.0/24",
        "f.yaml: network.cidr: cidr 10.0.0.0/24 (256 addresses) is too small for the subnets: they need 24768 addresses (one /18 in the compute AZ, a /20 in each other AZ, a /26 public subnet per AZ); use a larger cidr or smaller subnet prefixes",
    ),
    (
        DEV,
        "network.cidr",
        "10.0.0.1/16",
        "f.yaml: network.cidr: must be an IPv4 network such as 10.0.0.0/16, got '10.0.0.1/16' (10.0.0.1/16 has host bits set)",
    ),
    (
        DEV,
        "compute.instance_groups.0.placement",
        "cluster",
        "f.yaml: compute.instance_groups[0].placement: group 'workers': HyperPod groups do not take placement (HyperPod places and boots its own nodes)",
    ),
    (DEV, "compute.eks", {}, "f.yaml: compute.eks: only with orchestrator eks or when inference_node_groups exist"),
    (
        DEV,
        "compute.instance_groups.0.count",
        True,
        "f.yaml: compute.instance_groups[0].count: must be a number, got true (YAML reads unquoted true/false/yes/no/on/off as booleans)",
    ),
    (
        DEV,
        "compute.instance_groups.0.count",
        "2",
        "f.yaml: compute.instance_groups[0].count: must be a number, got the string '2' (quoted in YAML; write it without quotes)",
    ),
    (
        DEV,
        "compute.slurm.controller.instance_type",
        "ml.p5.48xlarge",
        "f.yaml: compute.slurm.controller.instance_type: 'ml.p5.48xlarge' is a GPU type (8 GPUs); the Slurm controller runs slurmctld "
        "and no job, so use a CPU type such as ml.m5.12xlarge (the default) or ml.c5.4xlarge",
    ),
    (
        STAGING,
        "compute.eks.kubernetes_version",
        1.3,  # what YAML makes of an unquoted 1.30
        'f.yaml: compute.eks.kubernetes_version: must be a quoted string such as "1.34": YAML reads an unquoted version as a '
        "number (1.30 becomes 1.3), got 1.3",
    ),
    (DEV, "compute.slurm.login.count", -1, "f.yaml: compute.slurm.login.count: Input should be greater than or equal to 0, got -1"),
    (STAGING, "network.az_ids", ["usw2-az4"], "f.yaml: network.az_ids: EKS needs subnets in at least two AZs; list at least two AZ IDs"),
    (
        EC2,
        "compute.instance_groups.0.instance_storage_gib",
        100,
        "f.yaml: compute.instance_groups[0].instance_storage_gib: group 'trainers': only HyperPod groups take instance_storage_gib; ec2 groups do not",
    ),
]


@pytest.mark.parametrize(("base", "path", "value", "expected"), BAD_CASES, ids=[c[1] + "=" + repr(c[2])[:30] for c in BAD_CASES])
def test_bad_values_give_one_exact_line(base: dict[str, Any], path: str, value: Any, expected: str) -> None:
    assert _problems(_with(base, path, value)) == [expected]


def _warnings(data: dict[str, Any]) -> list[str]:
    return [f.line("f.yaml") for f in parse_config(data, "f.yaml").warnings(date(2026, 12, 2))]


def test_login_nodes_may_be_a_gpu_type() -> None:
    assert parse_config(_with(DEV, "compute.slurm.login.instance_type", "ml.g5.12xlarge")).compute.slurm is not None


def test_an_end_that_has_passed_is_a_warning_that_says_why() -> None:
    odcr = _warnings(_with(EC2, "compute.instance_groups.0.capacity.end_date", "2020-01-10T00:00:00Z"))
    assert (
        "f.yaml: compute.instance_groups[0].capacity.end_date: warning: group 'trainers': end_date 2020-01-10T00:00:00Z has passed: "
        "EC2 cannot create a reservation that has ended (preflight refuses it); give a later end_date or leave it out (open-ended)"
    ) in odcr
    block = _with(EC2, "compute.instance_groups.0.capacity", {"type": "capacity-block", "reservation_ids": ["cr-0123456789abcdef0"]})
    block["compute"]["instance_groups"][0]["placement"] = "none"
    block["compute"]["instance_groups"][0]["capacity"].update(starts_at="2020-01-03T11:30:00Z", ends_at="2020-01-10T11:30:00Z")
    assert (
        "f.yaml: compute.instance_groups[0].capacity.ends_at: warning: group 'trainers': ends_at 2020-01-10T11:30:00Z has passed: "
        "the block is over and the group never scales out into it; give the next block's reservation_ids and window, or remove the group"
    ) in _warnings(block)
    # Ahead: no warning (the shipped example ends in 2027).
    assert not [w for w in _warnings(EC2) if "has passed" in w]


def test_a_reservation_group_in_a_new_cluster_placement_group_is_a_warning() -> None:
    # An existing reservation made in another placement group does not match launches into the new one
    # (docs/facts/capacity.md#odcr-placement-group-match); placement none (said in the config) gives no warning.
    reserved = _with(EC2, "compute.instance_groups.0.capacity", {"type": "reservation", "reservation_ids": ["cr-0123456789abcdef0"]})
    assert (
        "f.yaml: compute.instance_groups[0].placement: warning: group 'trainers': placement cluster puts the group in a new "
        "placement group: a reservation created in another placement group does not match its launches (preflight checks each "
        "reservation's), and one created without may still fail for capacity inside the group's placement; placement none avoids both"
    ) in _warnings(reserved)
    assert not [w for w in _warnings(_with(reserved, "compute.instance_groups.0.placement", "none")) if ".placement:" in w]


def test_an_eks_endpoint_open_to_every_address_is_a_warning() -> None:
    lines = _warnings(_with(STAGING, "compute.eks.public_access_cidrs", ["203.0.113.0/24", "0.0.0.0/0"]))
    assert (
        "f.yaml: compute.eks.public_access_cidrs[1]: warning: 0.0.0.0/0 opens the cluster's public Kubernetes API endpoint to every "
        "address on the internet (only IAM authentication stands in the way); list the CIDRs of your networks and CI runners, or [] "
        "for a private endpoint"
    ) in lines
    assert not [w for w in lines if "public_access_cidrs[0]" in w]


def test_a_gb200_capacity_block_group_is_refused_with_the_reason() -> None:
    # docs/capacity.md: fminfra lists GB200 UltraServer offerings and does not deploy onto them.
    group = {"name": "grace", "instance_type": "p6e-gb200.36xlarge", "count": 1, "placement": "none"}
    group["capacity"] = {"type": "capacity-block", "reservation_ids": ["cr-0bbbbbbbbbbbbbbb3"]}
    data = _with(EC2, "compute.instance_groups", [group])
    assert _problems(data) == [
        "f.yaml: compute.instance_groups[0].capacity.type: group 'grace': p6e-gb200.36xlarge Capacity Blocks are not deployable: "
        "fminfra lists GB200 UltraServer offerings (find --ultraserver-type) but does not deploy onto them: they are in a Local "
        "Zone, not an AZ ID, and the GB200 network layout is unverified; run p6e-gb200 on HyperPod (orchestrator slurm or eks) "
        "with capacity type training-plan"
    ]


def test_an_ec2_gpu_type_the_region_does_not_offer_is_one_line() -> None:
    # cfn-lint's EC2 instance types for us-east-2 (fminfra/core/ec2_regional.json) lack p6-b300.48xlarge; before, validate said ok.
    data = _with(EC2, "compute.instance_groups.0.instance_type", "p6-b300.48xlarge")
    assert data["region"] == "us-east-2"
    assert _problems(data) == [
        "f.yaml: compute.instance_groups[0].instance_type: p6-b300.48xlarge is not offered by EC2 in us-east-2 (cfn-lint's EC2 "
        "instance types for the region, from AWS's price list); regions that offer it: ap-northeast-2, ap-south-2, ap-southeast-3, "
        "eu-west-2, sa-east-1, us-east-1, us-gov-east-1, us-west-2"
    ]
    # Inference node groups are EC2 instances too; p6e-gb200 (a Local Zone type, in no region's list) is not judged by region.
    assert parse_config(_with(EC2, "compute.instance_groups.0.instance_type", "p5.48xlarge"))


def test_missing_required_field() -> None:
    assert _problems(_with(DEV, "network.compute_az_id", ...)) == ["f.yaml: network.compute_az_id: required field is missing"]


def test_hyperpod_name_form_is_normalized() -> None:
    cfg = parse_config(_with(DEV, "compute.instance_groups.0.instance_type", "ml.p5en.48xlarge"))
    assert cfg.compute.instance_groups[0].instance_type == "p5en.48xlarge"


def test_defaults_fill_orchestrator_sections() -> None:
    cfg = parse_config(_with(DEV, "compute.slurm", ...))
    assert cfg.compute.slurm is not None and cfg.compute.slurm.controller.instance_type == "ml.m5.12xlarge"
    assert cfg.observability.prometheus is True and cfg.observability.grafana.enabled is False


def test_yaml_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: dev\nnetwork: [\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.problems[0].startswith(f"{bad}: line ")


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "dup.yaml"
    bad.write_text((ROOT / "config" / "dev.yaml").read_text() + "name: again\n")
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_config(bad)


@pytest.mark.parametrize("text", ["", "# only a comment\n# and another\n"])
def test_an_empty_or_comments_only_file_says_so(tmp_path: Path, text: str) -> None:
    # Before: "must be a mapping of config sections, got NoneType".
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"{path}: (file): empty: no config sections, only comments or nothing; give version, name, account, region, network "
        "and compute (`python -m fminfra init` writes a starter file)"
    ]


def test_missing_file() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("nope/none.yaml")
    assert info.value.problems == ["nope/none.yaml: (file): no such file"]


def test_subnets_do_not_move_when_an_az_is_appended() -> None:
    before = {(s.az_id, s.public): s.cidr for s in parse_config(DEV).network.subnets()}
    after = {
        (s.az_id, s.public): s.cidr
        for s in parse_config(_with(DEV, "network.az_ids", [*DEV["network"]["az_ids"], "usw2-az3"])).network.subnets()
    }
    assert all(after[key] == cidr for key, cidr in before.items())
    assert len(after) == len(before) + 2


# ------------------------------------------------------------------------------------------
# AZ IDs: the dated table of docs/facts/network.md#az-ids-by-region, checked offline


def test_az_id_that_aws_does_not_list_is_rejected_in_one_line() -> None:
    assert _problems(_with(DEV, "network.az_ids", ["usw2-az1", "usw2-az9", "usw2-az4"])) == [
        "f.yaml: network.az_ids[1]: 'usw2-az9' is not an AZ ID of us-west-2; AWS lists usw2-az1, usw2-az2, usw2-az3, usw2-az4 (as of 2026-11-30)"
    ]


def test_newer_region_ap_southeast_6_is_known() -> None:
    """Its AZ IDs and region are accepted; what refuses the environment is the GPU type alone: cfn-lint's
    EC2 instance types for ap-southeast-6 (AWS's price list) name no GPU type fminfra's catalog has."""
    from fminfra.core.regional import ec2_types_in

    data = _with(DEV, "region", "ap-southeast-6")
    data = _with(data, "network.az_ids", ["apse6-az1", "apse6-az2", "apse6-az3"])
    data = _with(data, "network.compute_az_id", "apse6-az3")
    # HyperPod and FSx for Lustre are not offered there yet (docs/facts/network.md#regional-availability):
    # an inference-only EKS environment without a file system.
    data = _with(data, "storage", ...)
    data = _with(data, "compute", {"inference_node_groups": [{"name": "serve", "instance_type": "g6e.12xlarge"}]})
    with pytest.raises(ConfigError) as raised:
        parse_config(data, "f.yaml")
    assert [p.split(": ")[1] for p in raised.value.problems] == ["compute.inference_node_groups[0].instance_type"]
    assert "g6e.12xlarge is not offered by EC2 in ap-southeast-6" in raised.value.problems[0]
    assert not ec2_types_in("ap-southeast-6")


def test_az_id_table_matches_what_aws_lists() -> None:
    """Written out from the AWS Availability Zones page (docs/facts/network.md#az-ids-by-region),
    not derived from the code: a few regions whose numbers are not 1..n."""
    from fminfra.core.regions import AZ_IDS_BY_REGION, region_of_az_id

    assert AZ_IDS_BY_REGION["us-east-1"] == ("use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6")
    assert AZ_IDS_BY_REGION["ca-central-1"] == ("cac1-az1", "cac1-az2", "cac1-az4")
    assert AZ_IDS_BY_REGION["ap-southeast-6"] == ("apse6-az1", "apse6-az2", "apse6-az3")
    assert region_of_az_id("cac1-az3") is None
    assert region_of_az_id("usw2-az9") is None
    assert region_of_az_id("usgw1-az1") == "us-gov-west-1"  # no published table: prefix only


def test_az_id_table_agrees_with_moto_where_moto_has_the_region() -> None:
    """moto 5.2.5 ships, per region, the AZ IDs that offer instance types (an emulator's data, a
    cross-check only): each of its AZ IDs must be in our table."""
    import gzip
    import json
    from importlib import resources

    from fminfra.core.regions import AZ_IDS_BY_REGION

    folder = resources.files("moto") / "ec2" / "resources" / "instance_type_offerings" / "availability-zone-id"
    checked = 0
    for entry in folder.iterdir():
        region = entry.name.split(".json")[0]
        raw = entry.read_bytes()
        offers = json.loads(gzip.decompress(raw) if entry.name.endswith(".gz") else raw)
        ours = AZ_IDS_BY_REGION.get(region)
        assert ours is not None, region
        assert {o["Location"] for o in offers} <= set(ours), region
        checked += 1
    assert checked >= 30
