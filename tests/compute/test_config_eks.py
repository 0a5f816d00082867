"""EKS config rules: the system-pods rule per cluster kind, the system node group's
fields, and the Kubernetes version's support end with its 60-day warning."""

from __future__ import annotations

import copy
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.cli import main as cli
from fminfra.config import parse_config, read_yaml, standard_support_end
from fminfra.core.errors import ConfigError
from fminfra.ops.plan import render_plan

ROOT = Path(__file__).resolve().parents[2]
STAGING = read_yaml(ROOT / "config" / "staging.yaml")  # HyperPod EKS + a tainted inference group
INFERENCE = read_yaml(ROOT / "tests" / "configs" / "hp-slurm-inference.yaml")  # Slurm + inference-only EKS


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    return "\n".join(info.value.problems)


# --- the system-pods rule ----------------------------------------------------------------------------


def test_inference_only_cluster_defaults_to_two_system_nodes() -> None:
    cfg = parse_config(INFERENCE, "f.yaml")
    assert cfg.compute.untainted_node_sources() == []  # every group carries the GPU taint
    assert cfg.compute.system_node_count() == 2
    assert cfg.compute.eks is not None and cfg.compute.eks.system_nodes.instance_type == "m6i.large"


def test_hyperpod_eks_defaults_to_none() -> None:
    cfg = parse_config(STAGING, "f.yaml")
    assert cfg.compute.untainted_node_sources() == ["HyperPod instance group 'workers'"]
    assert cfg.compute.system_node_count() == 0


def test_untainted_inference_group_runs_system_pods() -> None:
    data = copy.deepcopy(INFERENCE)
    for group in data["compute"]["inference_node_groups"]:
        group["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "PreferNoSchedule"}]
    cfg = parse_config(data, "f.yaml")
    assert cfg.compute.system_node_count() == 0
    assert len(cfg.compute.untainted_node_sources()) == 1  # serve-p5 has desired_size 0, so only serve-g6


def test_an_empty_taint_list_means_no_taint_and_show_says_the_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`taints: []` is a choice (no taint), not the default: the GPU taint is the default, filled in
    where `show` prints it (newcomer read, C: `[]` was shown while the template carried the taint)."""
    data = copy.deepcopy(INFERENCE)
    defaulted = parse_config(data, "f.yaml").compute.inference_node_groups
    assert all([(t.key, t.value, t.effect) for t in g.taints] == [("nvidia.com/gpu", "true", "NoSchedule")] for g in defaulted)
    for group in data["compute"]["inference_node_groups"]:
        group["taints"] = []
    cfg = parse_config(data, "f.yaml")
    assert all(g.taints == [] for g in cfg.compute.inference_node_groups)
    assert cfg.compute.system_node_count() == 0  # serve-g6 has nodes and no taint: CoreDNS runs there
    path = tmp_path / "inf.yaml"
    path.write_text(yaml.safe_dump(INFERENCE))
    assert cli.main(["show", str(path)]) == 0
    assert "key: nvidia.com/gpu" in capsys.readouterr().out


def test_an_untainted_group_synthesizes_without_the_gpu_taint() -> None:
    import aws_cdk as cdk

    from fminfra.app.synth import build_app

    data = copy.deepcopy(INFERENCE)
    for group in data["compute"]["inference_node_groups"]:
        group["taints"] = []
    app = cdk.App()
    _, stages = build_app([parse_config(data, "f.yaml")], app=app)
    template = cdk.assertions.Template.from_stack(
        next(s for s in stages[0].node.children if isinstance(s, cdk.Stack) and s.stack_name.endswith("Compute"))
    )
    groups = template.find_resources("AWS::EKS::Nodegroup")
    inference = [g for g in groups.values() if not g["Properties"]["NodegroupName"].endswith("-system")]
    assert inference and all("Taints" not in g["Properties"] or g["Properties"]["Taints"] == [] for g in inference)


def test_no_node_for_coredns_is_a_config_error() -> None:
    data = copy.deepcopy(INFERENCE)
    data["compute"].setdefault("eks", {})["system_nodes"] = {"count": 0}
    assert _error(data) == (
        "f.yaml: compute.eks.system_nodes.count: no node of the EKS cluster could run CoreDNS and the other system pods: every "
        "inference node group is tainted (default nvidia.com/gpu=true:NoSchedule) (on lasting capacity: a training plan or a "
        "Capacity Block ends, and its nodes with it); set count to 1 or more (default 2), or give a node group no NoSchedule/NoExecute taint"
    )


def test_capacity_that_ends_is_no_lasting_home_for_system_pods() -> None:
    """A training plan terminates its nodes at its end and EKS scales a Capacity Block group to 0 before
    the block ends: neither keeps CoreDNS and the controllers running, so the system nodes default to 2
    (compute read, B: staging on a training plan got none)."""
    data = copy.deepcopy(STAGING)
    group = data["compute"]["instance_groups"][0]
    group["capacity"] = {
        "type": "training-plan",
        "training_plan_arn": f"arn:aws:sagemaker:{data['region']}:{data['account']}:training-plan/p",
    }
    cfg = parse_config(data, "f.yaml")
    assert cfg.compute.untainted_node_sources() == [] and cfg.compute.system_node_count() == 2
    data["compute"]["eks"]["system_nodes"] = {"count": 0}
    assert "(on lasting capacity: a training plan or a Capacity Block ends, and its nodes with it)" in _error(data)
    # the test of the test: the same group on demand is a lasting home
    assert parse_config(STAGING, "f.yaml").compute.untainted_node_sources() == ["HyperPod instance group 'workers'"]


def test_an_untainted_capacity_block_inference_group_is_no_lasting_home() -> None:
    data = yaml.safe_load((ROOT / "tests" / "configs" / "capacity-eks.yaml").read_text())
    blocks = [g for g in data["compute"]["inference_node_groups"] if g.get("capacity", {}).get("type") == "capacity-block"]
    assert blocks, "capacity-eks.yaml has a Capacity Block inference group"
    for g in data["compute"]["inference_node_groups"]:
        g["taints"] = []
    names = {g["name"] for g in blocks}
    sources = parse_config(data, "f.yaml").compute.untainted_node_sources()
    assert not [s for s in sources if any(f"{n!r}" in s for n in names)]


def test_hyperpod_eks_without_nodes_needs_system_nodes() -> None:
    data = copy.deepcopy(STAGING)
    data["compute"]["instance_groups"][0]["count"] = 0
    data["compute"]["eks"]["system_nodes"] = {"count": 0}
    assert "and no HyperPod instance group has nodes" in _error(data)
    data["compute"]["eks"]["system_nodes"] = {}
    assert parse_config(data, "f.yaml").compute.system_node_count() == 2


@pytest.mark.parametrize(
    ("instance_type", "message"),
    [
        ("ml.m5.large", "must be an EC2 instance type such as m6i.large (no ml. prefix), got 'ml.m5.large'"),
        ("M6I.LARGE", "must be an EC2 instance type such as m6i.large (no ml. prefix), got 'M6I.LARGE'"),
        ("g6.xlarge", "'g6.xlarge' is a GPU type; system nodes are for CoreDNS and other system pods, use a CPU type such as m6i.large"),
    ],
)
def test_system_node_instance_type(instance_type: str, message: str) -> None:
    data = copy.deepcopy(INFERENCE)
    data["compute"].setdefault("eks", {})["system_nodes"] = {"instance_type": instance_type}
    assert _error(data) == f"f.yaml: compute.eks.system_nodes.instance_type: {message}"


def test_plan_shows_the_system_nodes_and_the_support_end() -> None:
    text = render_plan(parse_config(INFERENCE, "f.yaml"))
    assert (
        "eks: Kubernetes 1.34 (EKS standard support ends 2026-12-02), system nodes 2 x m6i.large on demand "
        "(CoreDNS and other system pods; billed per instance hour)"
    ) in text
    assert "system nodes none (HyperPod instance group 'workers' run CoreDNS" in render_plan(parse_config(STAGING, "f.yaml"))


# --- the Kubernetes version --------------------------------------------------------------------------


def test_support_end_of_the_default_version() -> None:
    cfg = parse_config(STAGING, "f.yaml")
    assert cfg.compute.eks is not None
    assert standard_support_end(cfg.compute.eks.kubernetes_version) == date(2026, 12, 2)


@pytest.mark.parametrize(
    ("today", "warned"),
    [(date(2026, 10, 2), False), (date(2026, 10, 3), True), (date(2026, 11, 30), True), (date(2026, 12, 3), True)],
)
def test_warning_within_60_days_of_the_end(today: date, warned: bool) -> None:
    cfg = parse_config(STAGING, "f.yaml")
    warnings = [w for w in cfg.warnings(today) if w.path == "compute.eks.kubernetes_version"]
    assert bool(warnings) is warned
    if today == date(2026, 11, 30):
        assert warnings[0].message.startswith("1.34: EKS standard support ends on 2026-12-02 (2 days)")
    if today == date(2026, 12, 3):
        assert warnings[0].message.startswith("1.34: EKS standard support ended on 2026-12-02")


def test_no_kubernetes_warning_without_eks() -> None:
    dev = parse_config(read_yaml(ROOT / "config" / "dev.yaml"), "f.yaml")
    assert [w for w in dev.warnings(date(2026, 11, 30)) if w.path.startswith("compute.")] == []


def test_validate_prints_the_warning_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(ROOT / "config" / "staging.yaml")]) == 0
    assert "compute.eks.kubernetes_version: warning: 1.34: EKS standard support" in capsys.readouterr().err


def test_warning_where_the_health_monitoring_agent_has_no_image() -> None:
    data = copy.deepcopy(STAGING)
    data["region"], data["network"]["az_ids"], data["network"]["compute_az_id"] = "ap-northeast-2", ["apne2-az1", "apne2-az2"], "apne2-az1"
    data["compute"]["eks"].pop("accept_access")  # needs task governance, off in ap-northeast-2 (tests/eks/constructs/test_accept_access.py)
    warnings = {f.path: f.message for f in parse_config(data, "f.yaml").warnings(date(2026, 1, 1))}
    assert warnings["region"].startswith(
        "HyperPod's dependency chart has no health-monitoring agent image in ap-northeast-2; it pulls us-east-1's"
    )
    assert "region" not in {f.path: f.message for f in parse_config(STAGING, "f.yaml").warnings(date(2026, 1, 1))}


def test_default_system_node_type_is_an_ec2_instance_type() -> None:
    # Against botocore's EC2 model (the InstanceType enum), not against our own rule.
    import botocore.session

    from fminfra.config import SystemNodesConfig

    enum = botocore.session.get_session().get_service_model("ec2").shape_for("InstanceType").enum
    assert SystemNodesConfig().instance_type in enum
    assert "ml.m5.large" not in enum  # the test of the test: a HyperPod name is no EC2 type


@pytest.mark.parametrize(
    ("labels", "taints", "fragment"),
    [
        ({"bad key!": "x"}, [], "labels: key 'bad key!' is not a Kubernetes key"),
        ({"team": "-x"}, [], "labels: value '-x' of 'team' is not a Kubernetes value"),
        ({}, [{"key": "nvidia.com/gpu ", "value": "true"}], "taints[0]: key 'nvidia.com/gpu ' is not a Kubernetes key"),
    ],
)
def test_kubernetes_labels_and_taints_follow_kubernetes_syntax(labels: dict[str, str], taints: list[dict[str, str]], fragment: str) -> None:
    import copy

    import yaml

    from fminfra.config import parse_config
    from fminfra.core.errors import ConfigError
    from tests.conftest import ROOT

    data = yaml.safe_load((ROOT / "tests" / "configs" / "eks-inference-only.yaml").read_text())
    data = copy.deepcopy(data)
    group = data["compute"]["inference_node_groups"][0]
    group["labels"], group["taints"] = labels, taints
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert info.value.problems == [f"f.yaml: compute.inference_node_groups[0].{fragment}" + info.value.problems[0].split(fragment, 1)[1]]
    # Valid prefixed keys and empty values pass.
    group["labels"], group["taints"] = (
        {"fminfra.io/tier": "", "example.com/name": "serve"},
        [{"key": "nvidia.com/gpu", "value": "true"}],
    )
    assert parse_config(data).compute.inference_node_groups[0].labels["example.com/name"] == "serve"


# --------------------------------------------------------------------------------------------
# nothing scales an inference node group (docs/facts/eks.md#eks-nodegroup-desired-size-without-autoscaler)


def _unscaled(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(w.path, w.message) for w in parse_config(data, "f.yaml").warnings() if "nothing scales" in w.message]


def test_an_inference_group_whose_sizes_promise_scaling_warns() -> None:
    warned = _unscaled(INFERENCE)  # serve-p5 0-0-2, serve-g6 1-1-3
    assert [path.removeprefix("compute.") for path, _ in warned] == [
        "inference_node_groups[0].max_size",
        "inference_node_groups[1].max_size",
    ]
    assert "serve-p5: min_size 0 < max_size 2" in warned[0][1] and "no pod of this group's type ever runs" in warned[0][1]
    assert "keeps desired_size (1) nodes" in warned[1][1] and "ever runs" not in warned[1][1]


def test_a_fixed_size_inference_group_does_not_warn() -> None:
    data = copy.deepcopy(INFERENCE)
    for group in data["compute"]["inference_node_groups"]:
        group.update(min_size=group["max_size"], desired_size=group["max_size"])
    assert _unscaled(data) == []


def test_init_writes_a_fixed_size_inference_group(tmp_path: Path) -> None:
    out = tmp_path / "inf.yaml"
    # us-west-2: EC2 offers init's default inference type (g6e.12xlarge) there, not in eu-west-1 (fminfra/core/regional.py, ec2_offers).
    argv = ["init", "--name", "inf", "--account", "123456789012", "--region", "us-west-2", "--orchestrator", "none"]
    assert cli.main([*argv, "--count", "3", "--output", str(out)]) == 0
    (group,) = read_yaml(out)["compute"]["inference_node_groups"]
    assert (group["min_size"], group["desired_size"], group["max_size"]) == (3, 3, 3)
    assert _unscaled(read_yaml(out)) == []


# --- a Kubernetes version per cluster kind -------------------------------------------------------------


def _without_version(data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["compute"]["eks"].pop("kubernetes_version", None)
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (STAGING, "1.34"),  # HyperPod EKS: the newest on HyperPod's list
        (INFERENCE, "1.35"),  # EKS beside Slurm: the newest fminfra pins, in EKS standard support until 2027-03-27
        (read_yaml(ROOT / "tests" / "configs" / "eks-inference-only.yaml"), "1.35"),  # inference only, no eks section
    ],
)
def test_the_default_version_follows_the_cluster_kind(data: dict[str, Any], expected: str) -> None:
    data = _without_version(data) if "eks" in data["compute"] else data
    cfg = parse_config(data, "f.yaml")
    assert cfg.compute.eks is not None and cfg.compute.eks.kubernetes_version == expected


def test_hyperpod_eks_without_an_eks_section_takes_hyperpod_s_version() -> None:
    data = copy.deepcopy(STAGING)
    del data["compute"]["eks"]
    data["compute"].pop("inference_node_groups")
    cfg = parse_config(data, "f.yaml")
    assert cfg.compute.eks is not None and cfg.compute.eks.kubernetes_version == "1.34"


def test_hyperpod_eks_refuses_a_version_hyperpod_does_not_list() -> None:
    data = copy.deepcopy(STAGING)
    data["compute"]["eks"]["kubernetes_version"] = "1.35"
    assert _error(data) == (
        "f.yaml: compute.eks.kubernetes_version: '1.35' is not on SageMaker HyperPod's list of Kubernetes versions; "
        "allowed with orchestrator eks: 1.34 (HYPERPOD_EKS_KUBERNETES_VERSIONS in scripts/node/versions.env)"
    )


def test_the_support_warning_says_what_extended_support_costs() -> None:
    (hyperpod,) = [
        w.message for w in parse_config(STAGING, "f.yaml").warnings(date(2026, 12, 3)) if w.path == "compute.eks.kubernetes_version"
    ]
    assert "$0.60 instead of $0.10 per cluster hour" in hyperpod and "once HyperPod lists one" in hyperpod
    pinned = copy.deepcopy(INFERENCE)  # an inference-only cluster pinned to 1.34 is told to move to 1.35
    (inference,) = [
        w.message for w in parse_config(pinned, "f.yaml").warnings(date(2026, 12, 3)) if w.path == "compute.eks.kubernetes_version"
    ]
    assert "Move to 1.35 (the newest supported" in inference


# --- what EKS refuses that the schema would let through (newcomer read) ------------------------------


@pytest.mark.parametrize(
    ("arn", "expected"),
    [
        (
            "arn:aws:sts::111122223333:assumed-role/Admin/alice",
            "compute.eks.admin_principal_arns[0]: must be an IAM role or user ARN; 'arn:aws:sts::111122223333:assumed-role/Admin/alice' "
            "is an STS session, which EKS access entries refuse: use the role's ARN (arn:aws:iam::111122223333:role/Admin, "
            "with the role's path if it has one)",
        ),
        (
            "arn:aws:iam::111122223333:group/admins",
            "compute.eks.admin_principal_arns[0]: must be an IAM role or user ARN (arn:aws:iam::ACCOUNT:role/NAME or user/NAME; "
            "not a group or an STS session), got 'arn:aws:iam::111122223333:group/admins'",
        ),
    ],
)
def test_an_access_entry_principal_must_be_a_role_or_user(arn: str, expected: str) -> None:
    """docs/facts/eks.md#eks-access-entry-principal: no STS session principal, and a group is no principal."""
    data = copy.deepcopy(STAGING)
    data["compute"].setdefault("eks", {})["admin_principal_arns"] = [arn]
    assert _error(data) == f"f.yaml: {expected}"


def test_role_and_user_principals_are_accepted() -> None:
    data = copy.deepcopy(STAGING)
    arns = ["arn:aws:iam::111122223333:role/platform/Admin", "arn:aws:iam::111122223333:user/alice"]
    data["compute"].setdefault("eks", {})["admin_principal_arns"] = arns
    cfg = parse_config(data, "f.yaml")
    assert cfg.compute.eks is not None and cfg.compute.eks.admin_principal_arns == arns


@pytest.mark.parametrize("key", ["kubernetes.io/role", "node-role.kubernetes.io/gpu", "k8s.io/x", "eks.amazonaws.com/compute-type"])
def test_a_node_group_label_with_a_prefix_eks_reserves_is_refused(key: str) -> None:
    """docs/facts/eks.md#eks-nodegroup-reserved-label-prefixes."""
    data = copy.deepcopy(INFERENCE)
    data["compute"]["inference_node_groups"][0]["labels"] = {key: "gpu"}
    assert f"labels: key {key!r} has a prefix EKS reserves (kubernetes.io/, k8s.io/, eks.amazonaws.com/" in _error(data)


def test_labels_with_own_prefixes_are_accepted() -> None:
    data = copy.deepcopy(INFERENCE)
    data["compute"]["inference_node_groups"][0]["labels"] = {"example.com/team": "llm", "mykubernetes.io/x": "y", "tier": "a"}
    parse_config(data, "f.yaml")


def test_a_node_group_name_eks_cannot_take_is_refused() -> None:
    """docs/facts/eks.md#eks-nodegroup-name-length: fminfra-ENV-NAME at most 63 characters."""
    data = copy.deepcopy(INFERENCE)
    name = data["name"]
    room = 63 - len(f"fminfra-{name}-")

    def rename(new: str) -> None:
        group = data["compute"]["inference_node_groups"][0]
        old, group["name"] = group["name"], new
        for team in (data["compute"].get("eks") or {}).get("scheduling", {}).get("teams", []):
            team["instances"] = {new if g == old else g: n for g, n in team.get("instances", {}).items()}

    rename("a" * room)
    parse_config(data, "f.yaml")
    rename("a" * (room + 1))
    assert _error(data) == (
        f"f.yaml: compute.inference_node_groups[0].name: the node group's EKS name 'fminfra-{name}-{'a' * (room + 1)}' is 64 "
        f"characters; EKS allows at most 63 (fminfra-ENV-NAME): shorten the group name to at most {room} characters"
    )


def _inference_only_in(region: str, prefix: str, gpu_type: str, system_type: str | None = None) -> dict[str, Any]:
    data = read_yaml(ROOT / "tests" / "configs" / "eks-inference-only.yaml")
    data["region"] = region
    data["network"].update(az_ids=[f"{prefix}-az1", f"{prefix}-az2"], compute_az_id=f"{prefix}-az2")
    data["compute"]["inference_node_groups"][0]["instance_type"] = gpu_type
    if system_type:
        data["compute"]["eks"] = {"system_nodes": {"instance_type": system_type}}
    return data


def test_an_inference_group_type_the_region_does_not_offer_is_refused() -> None:
    """cfn-lint's EC2 instance types per region (docs/facts/network.md#regional-availability): no g6e in sa-east-1."""
    message = _error(_inference_only_in("sa-east-1", "sae1", "g6e.12xlarge"))
    assert message.startswith(
        "f.yaml: compute.inference_node_groups[0].instance_type: g6e.12xlarge is not offered by EC2 in sa-east-1 "
        "(cfn-lint's EC2 instance types for the region, from AWS's price list); regions that offer it: "
    )
    assert "us-east-1" in message and "sa-east-1," not in message
    parse_config(_inference_only_in("sa-east-1", "sae1", "g5.12xlarge"), "f.yaml")  # g5 is offered there


def test_a_system_node_type_the_region_does_not_offer_is_refused() -> None:
    """The default system node type, m6i.large, is not in eu-south-2's list; m5.large is."""
    data = _inference_only_in("eu-south-2", "eus2", "g6e.12xlarge")
    assert _error(data).startswith(
        "f.yaml: compute.eks.system_nodes.instance_type: m6i.large is not offered by EC2 in eu-south-2 (cfn-lint's EC2"
    )
    parse_config(_inference_only_in("eu-south-2", "eus2", "g6e.12xlarge", "m5.large"), "f.yaml")


def test_the_load_balancer_controller_on_hyperpod_nodes_alone_is_warned() -> None:
    """Serving read r2, unconfirmed (possible A): on HyperPod EKS with no system nodes and no untainted
    inference group, the controller's chart can only wait for HyperPod's nodes, tainted during their
    health checks, and helm gives up after 15 minutes."""
    from fminfra.config import parse_config, read_yaml
    from fminfra.eks.rules import LBC_WITHOUT_OWN_NODES

    raw = read_yaml(ROOT / "config" / "staging.yaml")
    raw["compute"]["eks"]["load_balancer_controller"] = True
    warned = [f for f in parse_config(raw, "staging.yaml").compute.warnings() if f.message == LBC_WITHOUT_OWN_NODES]
    assert [f.path for f in warned] == ["eks.load_balancer_controller"]
    raw["compute"]["eks"]["system_nodes"] = {"count": 2}
    assert not [f for f in parse_config(raw, "staging.yaml").compute.warnings() if f.message == LBC_WITHOUT_OWN_NODES]


def test_karpenter_spot_warns_about_the_spot_service_linked_role() -> None:
    """Serving read r4, B: spot pools fail in an account without AWSServiceRoleForEC2Spot, which nothing
    creates (docs/facts/karpenter.md#karpenter-spot-service-linked-role)."""
    from fminfra.config import parse_config, read_yaml
    from fminfra.eks.rules import KARPENTER_SPOT_ROLE

    raw = read_yaml(ROOT / "tests" / "configs" / "eks-karpenter.yaml")
    warned = [f.path for f in parse_config(raw, "k.yaml").compute.warnings() if f.message == KARPENTER_SPOT_ROLE]
    assert warned == ["eks.karpenter.capacity_types"]
    raw["compute"]["eks"]["karpenter"]["capacity_types"] = ["on-demand"]
    assert not [f for f in parse_config(raw, "k.yaml").compute.warnings() if f.message == KARPENTER_SPOT_ROLE]


def test_a_reservation_named_by_two_groups_is_refused() -> None:
    """Newcomer read r5, C: one reservation (and one Capacity Block) in two groups was accepted, and `cost`
    counted it twice (a block with two windows)."""
    raw = read_yaml(ROOT / "tests" / "configs" / "capacity-eks.yaml")
    shared = raw["compute"]["inference_node_groups"][0]["capacity"]["reservation_ids"][0]
    raw["compute"]["inference_node_groups"][1]["capacity"]["reservation_ids"] = [shared]
    message = _error(raw)
    assert f"inference_node_groups[1].capacity.reservation_ids[0]: {shared} is already group 'serve-reserved''s" in message
