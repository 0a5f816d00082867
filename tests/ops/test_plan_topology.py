"""`plan --topology` against botocore's Stubber: every request and response is validated against
EC2's model in the installed botocore (DescribeCapacityReservations, DescribeCapacityReservationTopology:
docs/facts/capacity.md#capacity-reservation-topology-request, #capacity-reservation-topology-response)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ParamValidationError
from botocore.stub import Stubber

from fminfra.cli.main import main
from fminfra.config import EnvironmentConfig, parse_config
from fminfra.ops import plan_topology
from fminfra.ops.plan import render_plan
from fminfra.ops.plan_topology import TopologyCallError, TopologyReader, read_topology, render_topology
from tests.conftest import ROOT
from tests.ops.test_preflight import ACCOUNT
from tests.ops.test_preflight import BASE as PREFLIGHT_BASE

# preflight's environment (moto's account, us-west-2), its groups replaced by each test's
BASE: dict[str, Any] = {**copy.deepcopy(PREFLIGHT_BASE), "name": "topo"}


def rid(n: int) -> str:
    return f"cr-0{n:016x}"


def _cfg(*groups: dict[str, Any], region: str | None = None) -> EnvironmentConfig:
    data = copy.deepcopy(BASE)
    data["compute"]["instance_groups"] = list(groups)
    if region == "il-central-1":
        data["region"] = region
        data["network"].update(az_ids=["ilc1-az1", "ilc1-az2"], compute_az_id="ilc1-az1")
    return parse_config(data, "topo.yaml")


def _group(name: str, instance_type: str, count: int, ids: list[str]) -> dict[str, Any]:
    kind = "capacity-block" if len(ids) == 1 and instance_type.startswith("p6") else "reservation"
    return {"name": name, "instance_type": instance_type, "count": count, "capacity": {"type": kind, "reservation_ids": ids}}


def _reservation(r: str, instances: int, instance_type: str = "p5.48xlarge", state: str = "active") -> dict[str, Any]:
    """A DescribeCapacityReservations item (botocore's CapacityReservation shape)."""
    return {
        "CapacityReservationId": r,
        "OwnerId": ACCOUNT,
        "AvailabilityZoneId": "usw2-az4",
        "AvailabilityZone": "us-west-2d",
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "Tenancy": "default",
        "TotalInstanceCount": instances,
        "AvailableInstanceCount": instances,
        "State": state,
        "InstanceMatchCriteria": "targeted",
    }


def _topology(r: str, nodes: list[str], instance_type: str = "p5.48xlarge", state: str = "active") -> dict[str, Any]:
    """A DescribeCapacityReservationTopology item (botocore's CapacityReservationTopology shape)."""
    return {
        "CapacityReservationId": r,
        "State": state,
        "InstanceType": instance_type,
        "NetworkNodes": nodes,
        "AvailabilityZoneId": "usw2-az4",
        "AvailabilityZone": "us-west-2d",
    }


class Ec2:
    """A real EC2 client whose answers come from a Stubber; sleeps are recorded, jitter is 1."""

    def __init__(self) -> None:
        self.client = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
        self.stub = Stubber(self.client)
        self.stub.activate()
        self.sleeps: list[float] = []
        self.reader = TopologyReader(self.client, sleep=self.sleeps.append, jitter=lambda: 1.0)

    def counts(self, *items: dict[str, Any]) -> None:
        ids = [i["CapacityReservationId"] for i in items]
        self.stub.add_response("describe_capacity_reservations", {"CapacityReservations": list(items)}, {"CapacityReservationIds": ids})

    def topology(self, ids: list[str], *items: dict[str, Any], next_token: str | None = None, token: str | None = None) -> None:
        response: dict[str, Any] = {"CapacityReservations": list(items)}
        if next_token:
            response["NextToken"] = next_token
        params: dict[str, Any] = {"CapacityReservationIds": ids}
        if token:
            params["NextToken"] = token
        self.stub.add_response("describe_capacity_reservation_topology", response, params)

    def error(self, operation: str, code: str, message: str = "") -> None:
        self.stub.add_client_error(operation, service_error_code=code, service_message=message, http_status_code=400)


@pytest.fixture
def ec2() -> Ec2:
    return Ec2()


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_three_layers_group_the_reservations_by_network_node_and_say_where_a_job_fits(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 4, [rid(1), rid(2)]))
    ec2.counts(_reservation(rid(1), 2), _reservation(rid(2), 2))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), ["nn-a", "nn-b", "nn-c"]), _topology(rid(2), ["nn-a", "nn-b", "nn-d"]))
    text = render_topology(cfg, ec2.reader)
    ec2.stub.assert_no_pending_responses()
    lines = _lines(text)
    assert f"group train (p5.48xlarge, 4 nodes, 3 network layers): {rid(1)} (2 instances), {rid(2)} (2 instances)" in lines
    # the table: layer 1 first, each node after its parent, instances summed under each node
    table = text.split("\n", 2)[2].splitlines()
    assert table[0].split() == ["layer", "network", "node", "reservations", "instances", "attached", "(finest", "node)"]
    rows = [row.split() for row in table[2:6]]
    assert rows == [
        ["1", "nn-a", f"{rid(1)},", rid(2), "4", "-"],
        ["2", "nn-b", f"{rid(1)},", rid(2), "4", "-"],
        ["3", "nn-c", rid(1), "2", rid(1)],
        ["3", "nn-d", rid(2), "2", rid(2)],
    ]
    assert "a job of 4 nodes fits in one layer-1 domain: yes, largest single-domain group 4" in lines
    assert "a job of 4 nodes fits in one layer-2 domain: yes, largest single-domain group 4" in lines
    assert "a job of 4 nodes fits in one layer-3 domain: no, largest single-domain group 2" in lines
    assert not [line for line in lines if line.startswith("note:")]


def test_four_layers_on_p6_b200(ec2: Ec2) -> None:
    cfg = _cfg(_group("b200", "p6-b200.48xlarge", 3, [rid(1), rid(2)]))
    ec2.counts(_reservation(rid(1), 2, "p6-b200.48xlarge"), _reservation(rid(2), 1, "p6-b200.48xlarge"))
    ec2.topology(
        [rid(1), rid(2)],
        _topology(rid(1), ["nn-a", "nn-b", "nn-c", "nn-d"], "p6-b200.48xlarge"),
        _topology(rid(2), ["nn-a", "nn-b", "nn-c", "nn-e"], "p6-b200.48xlarge"),
    )
    lines = _lines(render_topology(cfg, ec2.reader))
    assert "a job of 3 nodes fits in one layer-3 domain: yes, largest single-domain group 3" in lines
    assert "a job of 3 nodes fits in one layer-4 domain: no, largest single-domain group 2" in lines
    assert any(line.startswith("4") and "nn-e" in line and line.endswith(rid(2)) for line in lines)


def test_fewer_layers_than_the_type_has_are_said_and_count_in_no_finer_domain(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 3, [rid(1), rid(2)]))
    ec2.counts(_reservation(rid(1), 2), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), ["nn-a", "nn-b"]), _topology(rid(2), ["nn-a", "nn-b", "nn-c"]))
    lines = _lines(render_topology(cfg, ec2.reader))
    assert any(line.startswith(f"note: {rid(1)}: EC2 returned 2 of the 3 network layers of p5.48xlarge") for line in lines)
    assert "a job of 3 nodes fits in one layer-2 domain: yes, largest single-domain group 3" in lines
    assert "a job of 3 nodes fits in one layer-3 domain: no, largest single-domain group 1" in lines
    # the test of the test: the same reservations with all 3 layers carry no note
    ec2.counts(_reservation(rid(1), 2), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), ["nn-a", "nn-b", "nn-c"]), _topology(rid(2), ["nn-a", "nn-b", "nn-c"]))
    lines = _lines(render_topology(cfg, ec2.reader))
    assert not [line for line in lines if line.startswith("note:")]
    assert "a job of 3 nodes fits in one layer-3 domain: yes, largest single-domain group 3" in lines


def test_a_reservation_that_moves_between_two_calls_shows_the_newest_answer_and_says_so(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 2, [rid(1), rid(2)]))
    ec2.counts(_reservation(rid(1), 1), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), ["nn-a", "nn-b", "nn-c"]), next_token="page-2")
    ec2.topology([rid(1), rid(2)], _topology(rid(2), ["nn-a", "nn-b", "nn-d"]), _topology(rid(1), ["nn-a", "nn-b", "nn-d"]), token="page-2")
    groups, _ = read_topology(cfg, ec2.reader)
    assert [r.nodes for r in groups[0].reservations] == [("nn-a", "nn-b", "nn-d"), ("nn-a", "nn-b", "nn-d")]
    ec2.counts(_reservation(rid(1), 1), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), ["nn-a", "nn-b", "nn-c"]), next_token="page-2")
    ec2.topology([rid(1), rid(2)], _topology(rid(2), ["nn-a", "nn-b", "nn-d"]), _topology(rid(1), ["nn-a", "nn-b", "nn-d"]), token="page-2")
    lines = _lines(render_topology(cfg, ec2.reader))
    moved = [line for line in lines if "changed while plan read them" in line]
    assert moved == [
        f"note: {rid(1)}: its network nodes changed while plan read them (nn-a/nn-b/nn-c -> nn-a/nn-b/nn-d); shown: the newest "
        "answer; placement can change until the instances launch, so run plan again before you rely on it"
    ]
    assert "a job of 2 nodes fits in one layer-3 domain: yes, largest single-domain group 2" in lines
    assert not any("nn-c" in line for line in lines if line.startswith("3"))


def test_more_than_ten_reservations_are_asked_ten_ids_a_call_and_each_call_is_paged(ec2: Ec2) -> None:
    ids = [rid(n) for n in range(1, 13)]
    cfg = _cfg(_group("wide", "p5.48xlarge", 12, ids))
    ec2.counts(*(_reservation(r, 1) for r in ids[:10]))
    ec2.counts(*(_reservation(r, 1) for r in ids[10:]))
    nodes = ["nn-a", "nn-b", "nn-c"]
    ec2.topology(ids[:10], *(_topology(r, nodes) for r in ids[:6]), next_token="t1")
    ec2.topology(ids[:10], *(_topology(r, nodes) for r in ids[6:10]), token="t1")
    ec2.topology(ids[10:], *(_topology(r, nodes) for r in ids[10:]))
    lines = _lines(render_topology(cfg, ec2.reader))
    ec2.stub.assert_no_pending_responses()
    assert "a job of 12 nodes fits in one layer-3 domain: yes, largest single-domain group 12" in lines
    assert not [line for line in lines if line.startswith("note:")]


def test_eleven_ids_in_one_call_is_refused_by_the_expected_requests(ec2: Ec2, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the test above: a reader that put 11 ids in one call does not pass it."""
    monkeypatch.setattr(plan_topology, "IDS_PER_CALL", 11)
    ids = [rid(n) for n in range(1, 13)]
    ec2.counts(*(_reservation(r, 1) for r in ids[:10]))
    with pytest.raises(TopologyCallError, match="but received"):  # the Stubber's StubAssertionError, as one line
        read_topology(_cfg(_group("wide", "p5.48xlarge", 12, ids)), ec2.reader)


def test_throttling_is_retried_with_backoff_then_succeeds(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1)]))
    ec2.counts(_reservation(rid(1), 1))
    ec2.error("describe_capacity_reservation_topology", "RequestLimitExceeded", "Request limit exceeded.")
    ec2.error("describe_capacity_reservation_topology", "RequestLimitExceeded", "Request limit exceeded.")
    ec2.topology([rid(1)], _topology(rid(1), ["nn-a", "nn-b", "nn-c"]))
    lines = _lines(render_topology(cfg, ec2.reader))
    assert ec2.sleeps == [1.0, 2.0]  # rand(0,1) * min(2**i, 20) with rand = 1
    assert "a job of 1 nodes fits in one layer-3 domain: yes, largest single-domain group 1" in lines


def test_throttling_past_the_retries_is_one_line(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1)]))
    ec2.counts(_reservation(rid(1), 1))
    for _ in range(plan_topology.THROTTLE_ATTEMPTS):
        ec2.error("describe_capacity_reservation_topology", "RequestLimitExceeded")
    with pytest.raises(TopologyCallError, match=r"throttled DescribeCapacityReservationTopology \(RequestLimitExceeded\) 5 times"):
        read_topology(cfg, ec2.reader)
    assert ec2.sleeps == [1.0, 2.0, 4.0, 8.0]
    ec2.stub.assert_no_pending_responses()


def test_other_errors_are_not_retried(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1)]))
    ec2.error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound", f"The reservation '{rid(1)}' does not exist")
    with pytest.raises(TopologyCallError, match=r"InvalidCapacityReservationId\.NotFound"):
        read_topology(cfg, ec2.reader)
    assert ec2.sleeps == []


def _plan_cli(tmp_path: Path, cfg_data: dict[str, Any], ec2: Ec2, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    path = tmp_path / "topo.yaml"
    path.write_text(yaml.safe_dump(cfg_data))
    monkeypatch.setattr(plan_topology, "reader_for", lambda cfg, profile: ec2.reader)
    return main(["plan", str(path), *args])


def _one_group() -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["compute"]["instance_groups"] = [_group("train", "p5.48xlarge", 1, [rid(1)])]
    return data


def test_unauthorized_names_the_iam_action_in_one_line(
    ec2: Ec2, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _one_group()
    ec2.counts(_reservation(rid(1), 1))
    ec2.error("describe_capacity_reservation_topology", "UnauthorizedOperation", "You are not authorized to perform this operation.")
    assert _plan_cli(tmp_path, data, ec2, monkeypatch, "--topology") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "plan --topology: DescribeCapacityReservationTopology was denied (UnauthorizedOperation): the credentials need the IAM "
        "action ec2:DescribeCapacityReservationTopology (docs/compute.md#before-deploy-plan)"
    )
    assert "Traceback" not in "\n".join(err)
    assert ec2.sleeps == []


def test_an_unsupported_region_is_one_line_and_no_call(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1)]), region="il-central-1")
    text = render_topology(cfg, ec2.reader)  # the Stubber has no answers: any call would raise
    assert text.splitlines()[-1] == (
        "topology: EC2 does not offer DescribeCapacityReservationTopology in il-central-1 (not on the EC2 guide's list); no topology "
        "to show (docs/facts/instances.md#ec2-topology-regions)"
    )
    # the test of the test: the same group in us-west-2 does call EC2
    with pytest.raises(TopologyCallError, match="DescribeCapacityReservations"):  # the Stubber had no answer
        render_topology(_cfg(_group("train", "p5.48xlarge", 1, [rid(1)])), ec2.reader)


def test_a_region_whose_ec2_answers_unsupported_operation_is_one_line(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1)]))
    ec2.counts(_reservation(rid(1), 1))
    ec2.error("describe_capacity_reservation_topology", "UnsupportedOperation", "The operation is not supported in this region.")
    text = render_topology(cfg, ec2.reader)
    assert "EC2 does not offer DescribeCapacityReservationTopology in us-west-2 (EC2 answered UnsupportedOperation)" in text


def test_an_expired_reservation_has_no_network_nodes_and_says_why(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 2, [rid(1), rid(2)]))
    ec2.counts(_reservation(rid(1), 1, state="expired"), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), [], state="expired"), _topology(rid(2), ["nn-a", "nn-b", "nn-c"]))
    lines = _lines(render_topology(cfg, ec2.reader))
    assert (
        f"note: {rid(1)}: no network nodes: its state is expired: EC2 gives network nodes only for active or pending reservations; "
        "its instances count in no domain"
    ) in lines
    assert "a job of 2 nodes fits in one layer-1 domain: no, largest single-domain group 1" in lines
    # the test of the test: an active reservation without nodes is a different note
    ec2.counts(_reservation(rid(1), 1), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(1), []), _topology(rid(2), ["nn-a", "nn-b", "nn-c"]))
    lines = _lines(render_topology(cfg, ec2.reader))
    assert (
        f"note: {rid(1)}: no network nodes: EC2 gave none (state active; the type may not be supported); its instances count in no domain"
        in lines
    )


def test_a_reservation_missing_from_the_answer_is_said(ec2: Ec2) -> None:
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1), rid(2)]))
    ec2.counts(_reservation(rid(1), 1), _reservation(rid(2), 1))
    ec2.topology([rid(1), rid(2)], _topology(rid(2), ["nn-a", "nn-b", "nn-c"]))
    lines = _lines(render_topology(cfg, ec2.reader))
    assert f"note: {rid(1)}: not in EC2's topology answer; its domains are unknown" in lines


def test_groups_without_ec2_reservations_are_said_and_not_asked(ec2: Ec2) -> None:
    cfg = _cfg(
        {"name": "odcr", "instance_type": "p5.48xlarge", "count": 1, "capacity": {"type": "odcr"}},
        {"name": "od", "instance_type": "p5.48xlarge", "count": 1},
    )
    text = render_topology(cfg, ec2.reader)
    assert "group odcr: odcr: the deploy creates the reservation, so there is none to describe before it" in text
    assert "od:" not in text


def test_the_fixtures_are_validated_against_ec2s_model(ec2: Ec2) -> None:
    """The Stubber refuses a response that does not fit botocore's shape (NetworkNodes is a list of strings)."""
    with pytest.raises(ParamValidationError, match="NetworkNodes"):
        ec2.topology([rid(1)], {**_topology(rid(1), []), "NetworkNodes": "nn-a"})


def test_plan_without_topology_makes_no_call_and_prints_the_offline_plan(
    ec2: Ec2, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _one_group()
    assert _plan_cli(tmp_path, data, ec2, monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.strip() == render_plan(parse_config(data, "topo.yaml"))
    assert "topology" not in out
    assert _plan_cli(tmp_path, data, ec2, monkeypatch, "--profile", "p") == 2
    assert capsys.readouterr().err.strip() == "plan: --profile applies to --topology only (plan alone makes no AWS calls)"


def test_plan_with_topology_prints_it_after_the_plan(
    ec2: Ec2, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _one_group()
    ec2.counts(_reservation(rid(1), 1))
    ec2.topology([rid(1)], _topology(rid(1), ["nn-a", "nn-b", "nn-c"]))
    assert _plan_cli(tmp_path, data, ec2, monkeypatch, "--topology") == 0
    out = capsys.readouterr().out
    assert out.startswith(render_plan(parse_config(data, "topo.yaml")))
    assert "topology of the reserved groups (DescribeCapacityReservationTopology, us-west-2):" in out


def test_the_client_leaves_throttling_retries_to_the_reader() -> None:
    """botocore's own retries are off for the topology client, so its attempts and the reader's do not multiply;
    the shared client's timeouts stay."""
    config = plan_topology.TOPOLOGY_CLIENT_CONFIG
    assert config.retries == {"mode": "standard", "total_max_attempts": 1}
    assert (config.connect_timeout, config.read_timeout) == (5, 30)


def test_the_example_in_docs_compute_is_what_plan_prints(ec2: Ec2) -> None:
    """docs/compute.md (Before deploy: `plan`) shows this run's output verbatim."""
    a, b = "cr-0a1b2c3d4e5f60001", "cr-0a1b2c3d4e5f60002"
    top, middle = "nn-1a2b3c4d5e6f70001", "nn-2a2b3c4d5e6f70001"
    ec2.counts(_reservation(a, 2), _reservation(b, 2))
    ec2.topology([a, b], _topology(a, [top, middle, "nn-3a2b3c4d5e6f70001"]), _topology(b, [top, middle, "nn-3a2b3c4d5e6f70002"]))
    text = render_topology(_cfg(_group("train", "p5.48xlarge", 4, [a, b])), ec2.reader)
    section = (ROOT / "docs" / "compute.md").read_text().split("### Before deploy: `plan`", 1)[1].split("\n### ", 1)[0]
    assert f"```\n{text}\n```" in section


def test_a_denied_instance_count_call_names_its_own_action(ec2: Ec2) -> None:
    ec2.error("describe_capacity_reservations", "UnauthorizedOperation", "You are not authorized to perform this operation.")
    with pytest.raises(TopologyCallError, match=r"need the IAM action ec2:DescribeCapacityReservations \("):
        read_topology(_cfg(_group("train", "p5.48xlarge", 1, [rid(1)])), ec2.reader)


@pytest.mark.parametrize("region", ["eu-south-1", "ca-west-1", "us-gov-east-1", "cn-north-1", "il-central-1"])
def test_a_region_off_the_ec2_guides_list_is_one_line_and_no_call(ec2: Ec2, region: str) -> None:
    """The EC2 guide lists the regions that offer reservation topology (docs/facts/instances.md#ec2-topology-regions):
    an allowlist, so a region it does not name is never asked."""
    cfg = _cfg(_group("train", "p5.48xlarge", 1, [rid(1)])).model_copy(update={"region": region})
    text = render_topology(cfg, ec2.reader)  # the Stubber has no answers: any call would raise
    assert f"topology: EC2 does not offer DescribeCapacityReservationTopology in {region}" in text.splitlines()[-1]
    # the test of the test: a region on the list (the Stubber's us-west-2, and eu-south-2) does call EC2
    for listed in ("us-west-2", "eu-south-2"):
        with pytest.raises(TopologyCallError, match="DescribeCapacityReservations"):
            render_topology(cfg.model_copy(update={"region": listed}), ec2.reader)
