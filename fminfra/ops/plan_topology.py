"""`plan --topology`: how each reserved group's reservations spread over EC2's network, and whether
a job of the group's size fits in one network domain.

Read-only EC2 calls in the config's region (docs/compute.md#before-deploy-plan):
DescribeCapacityReservations for each reservation's instance count, then
DescribeCapacityReservationTopology for its network nodes, top of the hierarchy first
(docs/facts/capacity.md#capacity-reservation-topology-request,
docs/facts/capacity.md#capacity-reservation-topology-response). A reservation's instances count under
the last (finest) network node EC2 returns for it; a domain at layer K is the set of reservations that
share their first K nodes.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from fminfra.capacity.rules import TOPOLOGY_IAM_ACTION as IAM_ACTION
from fminfra.capacity.rules import TOPOLOGY_IDS_PER_CALL as IDS_PER_CALL
from fminfra.capacity.rules import TOPOLOGY_STATES
from fminfra.config import EnvironmentConfig, InferenceNodeGroupConfig, InstanceGroupConfig
from fminfra.core.table import format_table
from fminfra.ops.aws import CLIENT_CONFIG, AwsAccessError, access_problem, error_code
from fminfra.topology.rules import RESERVATION_TOPOLOGY_REGIONS, network_layers

# EC2's common codes for an action it does not take; which one a region off the EC2 guide's list answers is
# unverified, so plan decides by the list first (docs/facts/instances.md#ec2-topology-regions) and keeps this as a fallback.
UNSUPPORTED_CODES = ("UnsupportedOperation", "InvalidAction")
# Throttling: EC2 answers RequestLimitExceeded; retry with capped exponential backoff and full jitter,
# as botocore's standard mode does: rand(0, 1) * min(1 s * 2**i, 20 s), 5 attempts in all
# (docs/facts/capacity.md#ec2-request-limit-exceeded). botocore's own retries are off for these calls
# (total_max_attempts 1), so the attempts do not multiply.
THROTTLE_CODE = "RequestLimitExceeded"
THROTTLE_ATTEMPTS = 5
THROTTLE_MAX_BACKOFF_S = 20.0
TOPOLOGY_CLIENT_CONFIG = CLIENT_CONFIG.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))

Group = InstanceGroupConfig | InferenceNodeGroupConfig


class TopologyCallError(AwsAccessError):
    """A topology call that cannot be answered (denied, throttled past the retries, another EC2 error): one line, exit 2."""


@dataclass
class Reservation:
    """What plan knows of one reservation: its instances (DescribeCapacityReservations) and its
    network nodes (DescribeCapacityReservationTopology, the newest answer); `moved` holds the older
    node lists when EC2 answered differently within one run."""

    rid: str
    instances: int | None = None
    state: str | None = None
    nodes: tuple[str, ...] = ()
    answered: bool = False
    moved: list[tuple[str, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class GroupTopology:
    """One reserved group: its node count, the layers its type has, its reservations."""

    name: str
    instance_type: str
    count: int
    type_layers: int | None
    reservations: tuple[Reservation, ...]

    def domains(self, layer: int) -> dict[tuple[str, ...], list[Reservation]]:
        """Reservations by their first LAYER network nodes (those with fewer nodes are left out)."""
        out: dict[tuple[str, ...], list[Reservation]] = defaultdict(list)
        for r in self.reservations:
            if len(r.nodes) >= layer:
                out[r.nodes[:layer]].append(r)
        return dict(out)

    def largest(self, layer: int) -> int:
        """The most instances in one layer-LAYER domain."""
        return max((sum(r.instances or 0 for r in rs) for rs in self.domains(layer).values()), default=0)

    @property
    def layers_shown(self) -> int:
        return max((len(r.nodes) for r in self.reservations), default=0)


def _count(group: Group) -> int:
    return group.count if isinstance(group, InstanceGroupConfig) else group.max_size


class TopologyReader:
    """The EC2 calls of `plan --topology`, with throttling retried (SLEEP and JITTER: tests pass their own)."""

    def __init__(self, ec2: Any, *, sleep: Callable[[float], None] = time.sleep, jitter: Callable[[], float] = random.random) -> None:
        self.ec2, self.sleep, self.jitter = ec2, sleep, jitter

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        for attempt in range(THROTTLE_ATTEMPTS):
            try:
                return dict(getattr(self.ec2, operation)(**params))
            except ClientError as exc:
                if error_code(exc) != THROTTLE_CODE or attempt == THROTTLE_ATTEMPTS - 1:
                    raise
                self.sleep(self.jitter() * min(2.0**attempt, THROTTLE_MAX_BACKOFF_S))
        raise AssertionError("unreachable")

    def instance_counts(self, ids: list[str], found: dict[str, Reservation]) -> None:
        """TotalInstanceCount and State per reservation, ODCR or Capacity Block
        (docs/facts/capacity.md#capacity-reservation-total-instance-count)."""
        for chunk in _chunks(ids):
            params: dict[str, Any] = {"CapacityReservationIds": chunk}
            while True:
                page = self.call("describe_capacity_reservations", **params)
                for item in page.get("CapacityReservations", []):
                    r = found[item["CapacityReservationId"]]
                    r.instances, r.state = item.get("TotalInstanceCount"), item.get("State")
                if not page.get("NextToken"):
                    break
                params["NextToken"] = page["NextToken"]

    def topology(self, ids: list[str], found: dict[str, Reservation]) -> None:
        """Network nodes per reservation, 10 ids a call, each call paged by NextToken (botocore has no
        paginator for it). A reservation answered twice keeps the newest answer and records the older."""
        for chunk in _chunks(ids):
            params: dict[str, Any] = {"CapacityReservationIds": chunk}
            while True:
                page = self.call("describe_capacity_reservation_topology", **params)
                for item in page.get("CapacityReservations", []):
                    r = found.setdefault(item["CapacityReservationId"], Reservation(item["CapacityReservationId"]))
                    nodes = tuple(item.get("NetworkNodes") or ())
                    if r.answered and nodes != r.nodes:
                        r.moved.append(r.nodes)
                    r.nodes, r.answered = nodes, True
                    r.state = item.get("State") or r.state
                if not page.get("NextToken"):
                    break
                params["NextToken"] = page["NextToken"]


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), IDS_PER_CALL):
        yield ids[i : i + IDS_PER_CALL]


def reserved_groups(cfg: EnvironmentConfig) -> tuple[list[tuple[Group, list[str]]], list[str]]:
    """The groups whose config names EC2 reservations (reservation, capacity-block), with their ids,
    and a line for each reserved group plan cannot show (training plans, ODCRs the deploy creates,
    types with no EC2 topology)."""
    groups: list[tuple[Group, list[str]]] = []
    lines: list[str] = []
    for _, group in cfg.compute.groups_with_paths():
        cap = group.capacity
        if cap.type == "training-plan":
            lines.append(
                f"group {group.name}: training plan {(cap.training_plan_arn or '').rsplit('/', 1)[-1]}: SageMaker reserved capacity, "
                "no EC2 Capacity Reservation id to describe; HyperPod labels the nodes with their network nodes once they run"
            )
        elif cap.type == "odcr":
            lines.append(f"group {group.name}: odcr: the deploy creates the reservation, so there is none to describe before it")
        elif cap.reservation_ids:
            if network_layers(group.instance_type) is None:
                lines.append(
                    f"group {group.name}: {group.instance_type} has no EC2 network topology "
                    "(docs/facts/instances.md#ec2-topology-network-layers); not asked"
                )
            else:
                groups.append((group, list(cap.reservation_ids)))
    return groups, lines


def read_topology(cfg: EnvironmentConfig, reader: TopologyReader) -> tuple[list[GroupTopology], list[str]]:
    """Each reserved group's reservations with their instances and network nodes, and the lines for
    the groups plan cannot show. An unsupported region: no call, one line."""
    groups, lines = reserved_groups(cfg)
    if not groups:
        return [], lines or ["no group names EC2 reservations (reservation_ids): nothing to describe"]
    if cfg.region not in RESERVATION_TOPOLOGY_REGIONS:  # the EC2 guide's list (docs/facts/instances.md#ec2-topology-regions)
        return [], [*lines, _unsupported(cfg.region)]
    ids = list(dict.fromkeys(rid for _, rids in groups for rid in rids))
    found = {rid: Reservation(rid) for rid in ids}
    try:
        reader.instance_counts(ids, found)
        reader.topology(ids, found)
    except ClientError as exc:
        if error_code(exc) in UNSUPPORTED_CODES:
            return [], [*lines, _unsupported(cfg.region, error_code(exc))]
        raise _call_error(exc) from None
    except BotoCoreError as exc:
        raise access_problem(exc) or TopologyCallError(f"plan --topology: {exc}") from None
    out = [
        GroupTopology(
            name=group.name,
            instance_type=group.instance_type,
            count=_count(group),
            type_layers=network_layers(group.instance_type),
            reservations=tuple(found[rid] for rid in rids),
        )
        for group, rids in groups
    ]
    return out, lines


def _unsupported(region: str, code: str = "") -> str:
    because = f" (EC2 answered {code})" if code else " (not on the EC2 guide's list)"
    return (
        f"topology: EC2 does not offer DescribeCapacityReservationTopology in {region}{because}; no topology to show "
        "(docs/facts/instances.md#ec2-topology-regions)"
    )


def _call_error(exc: ClientError) -> AwsAccessError:
    problem = access_problem(exc)
    if problem is not None:
        return problem
    code = error_code(exc)
    if code == "UnauthorizedOperation":
        return TopologyCallError(
            f"plan --topology: {exc.operation_name} was denied (UnauthorizedOperation): the credentials need the IAM action "
            f"{IAM_ACTION if exc.operation_name == 'DescribeCapacityReservationTopology' else 'ec2:DescribeCapacityReservations'} "
            "(docs/compute.md#before-deploy-plan)"
        )
    if code == THROTTLE_CODE:
        return TopologyCallError(
            f"plan --topology: EC2 throttled {exc.operation_name} (RequestLimitExceeded) {THROTTLE_ATTEMPTS} times; run it again later"
        )
    message = exc.response.get("Error", {}).get("Message", "")
    return TopologyCallError(f"plan --topology: {exc.operation_name} failed: {code}: {message} (`preflight` checks each reservation)")


def _instances(r: Reservation) -> str:
    return "unknown" if r.instances is None else f"{r.instances} instance{'' if r.instances == 1 else 's'}"


def group_lines(g: GroupTopology) -> list[str]:
    """The lines of one reserved group: a table of network nodes by layer (layer 1 the top), each with
    its reservations and instances, the notes, and whether a job of the group's size fits one domain."""
    lines = [
        f"group {g.name} ({g.instance_type}, {g.count} nodes, {g.type_layers} network layers): "
        + ", ".join(f"{r.rid} ({_instances(r)})" for r in g.reservations)
    ]
    rows = []
    paths = sorted({r.nodes[:layer] for r in g.reservations for layer in range(1, len(r.nodes) + 1)})  # each node after its parent
    for path in paths:
        under = [r for r in g.reservations if r.nodes[: len(path)] == path]
        attached = [r.rid for r in under if len(r.nodes) == len(path)]
        rows.append(
            [
                str(len(path)),
                "  " * (len(path) - 1) + path[-1],
                ", ".join(r.rid for r in under),
                str(sum(r.instances or 0 for r in under)),
                ", ".join(attached) or "-",
            ]
        )
    if rows:
        lines.append(format_table(["layer", "network node", "reservations", "instances", "attached (finest node)"], rows))
    for r in g.reservations:
        lines.extend(f"  note: {n}" for n in _notes(g, r))
    for layer in range(1, (g.type_layers or g.layers_shown) + 1):
        largest = g.largest(layer)
        fits = "yes" if largest >= g.count else "no"
        lines.append(f"  a job of {g.count} nodes fits in one layer-{layer} domain: {fits}, largest single-domain group {largest}")
    return lines


def _notes(g: GroupTopology, r: Reservation) -> list[str]:
    notes = []
    if not r.answered:
        notes.append(f"{r.rid}: not in EC2's topology answer; its domains are unknown")
    elif not r.nodes:
        state = r.state or "unknown"
        why = (
            f"its state is {state}: EC2 gives network nodes only for active or pending reservations"
            if state not in TOPOLOGY_STATES
            else f"EC2 gave none (state {state}; the type may not be supported)"
        )
        notes.append(f"{r.rid}: no network nodes: {why}; its instances count in no domain")
    elif g.type_layers is not None and len(r.nodes) != g.type_layers:
        notes.append(
            f"{r.rid}: EC2 returned {len(r.nodes)} of the {g.type_layers} network layers of {g.instance_type} "
            "(a reservation may show 1, 2 or 3); it counts in no domain below layer "
            f"{len(r.nodes)} (docs/facts/instances.md#ec2-topology-network-layers)"
        )
    if r.instances is None:
        notes.append(f"{r.rid}: not in DescribeCapacityReservations' answer; its instances count as 0")
    for older in r.moved:
        notes.append(
            f"{r.rid}: its network nodes changed while plan read them ({'/'.join(older) or 'none'} -> {'/'.join(r.nodes) or 'none'}); "
            "shown: the newest answer; placement can change until the instances launch, so run plan again before you rely on it"
        )
    return notes


def render_topology(cfg: EnvironmentConfig, reader: TopologyReader) -> str:
    """The text `plan --topology` adds after the plan of one environment."""
    groups, lines = read_topology(cfg, reader)
    out = [f"topology of the reserved groups (DescribeCapacityReservationTopology, {cfg.region}):"]
    for g in groups:
        out.extend(group_lines(g))
    out.extend(lines)
    return "\n".join(out)


def reader_for(cfg: EnvironmentConfig, profile: str | None) -> TopologyReader:
    from fminfra.ops.aws import make_session

    session = make_session(region=cfg.region, profile=profile)
    return TopologyReader(session.client("ec2", config=TOPOLOGY_CLIENT_CONFIG))
