"""`python -m fminfra preflight CONFIG`: catch capacity mistakes before a deploy.

Read-only AWS calls in the config's region: the AZ IDs exist in the account, every instance type
is offered in the compute AZ, reservations / Capacity Blocks / training plans exist and match
their group, quotas (vCPUs, network interfaces, SageMaker and HyperPod instances) cover the groups
on top of what the account already runs, and the compute subnet has room for the nodes. This
environment's own deployed nodes count as available, so a re-run after a deploy does not count
them twice. Prints one PASS/WARN/FAIL row per check with its reason; exit 1 when any row FAILs.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from fminfra import catalog
from fminfra.capacity.rules import RESERVATION_QUOTA_STATES, reservation_placement_problem, scale_in_time, utc_timestamp
from fminfra.config import EnvironmentConfig, InferenceNodeGroupConfig, InstanceGroupConfig
from fminfra.core.findings import Finding, Level
from fminfra.core.table import format_table
from fminfra.network.rules import SUBNET_RESERVED_IPS
from fminfra.ops.aws import AwsAccessError, access_problem, error_code

Status = Literal["PASS", "WARN", "FAIL"]

# A Capacity Block or training plan that starts within this window "starts soon": PASS with its
# start shown. Later ones WARN, since nothing can run on them yet.
STARTS_SOON = timedelta(days=7)
# EC2 On-Demand vCPU quotas by instance family letter (Service Quotas, service code ec2).
EC2_VCPU_QUOTAS = {
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
}
# Addresses an EKS node's pods may take from the subnet with the VPC CNI (one per pod; 110 is
# the kubelet's default max-pods). An estimate: prefix delegation or custom networking differ.
EKS_POD_IPS_PER_NODE = 110
LINUX_PLATFORM = "Linux/UNIX"
# "Network interfaces per Region" (Service Quotas, service code vpc; default 5,000). HyperPod's
# prerequisites say to check it: every EFA interface is a network interface, so a p5 node takes
# 33 (docs/facts/network.md#eni-quota-per-region).
ENI_QUOTA = ("vpc", "L-DF5E4CA3", "Network interfaces per Region")
# HyperPod's account-level quotas, by the names its prerequisites give
# (docs/facts/hyperpod.md#hyperpod-account-quotas).
HYPERPOD_PER_CLUSTER_QUOTA = "Maximum number instances allowed per SageMaker HyperPod cluster"
HYPERPOD_TOTAL_QUOTA = "Total number of instances allowed across SageMaker HyperPod clusters"
# Instances that hold On-Demand capacity and addresses: what the vCPU and interface counts take.
LIVE_STATES = ("pending", "running", "stopping", "stopped")


# A preflight row is a Finding: path = what was checked (a reservation, a quota), check = which check,
# message = the reason; its level prints as the row's status.
Row = Finding
LEVEL_OF: dict[Status, Level] = {"PASS": "info", "WARN": "warning", "FAIL": "error"}
STATUS_OF: dict[Level, Status] = {level: status for status, level in LEVEL_OF.items()}


@dataclass(frozen=True)
class Clients:
    """The AWS clients preflight uses (tests pass moto- or Stubber-backed ones)."""

    ec2: Any
    service_quotas: Any
    sagemaker: Any
    sts: Any
    autoscaling: Any = None  # the deployed ec2 groups and their pending scheduled actions


Group = InstanceGroupConfig | InferenceNodeGroupConfig


def _groups(cfg: EnvironmentConfig) -> list[tuple[str, Group]]:
    kind = "hyperpod" if cfg.compute.hyperpod else "ec2"
    return [
        *((kind, g) for g in cfg.compute.instance_groups),
        *(("eks-inference", g) for g in cfg.compute.inference_node_groups),
    ]


def _count(group: Group) -> int:
    return group.count if isinstance(group, InstanceGroupConfig) else group.max_size


def _when(value: datetime, now: datetime) -> str:
    delta = value - now
    days = abs(delta).total_seconds() / 86400
    span = f"{days:.1f} days" if days >= 1 else f"{abs(delta).total_seconds() / 3600:.1f} hours"
    return f"{utc_timestamp(value)} ({'in ' + span if delta >= timedelta(0) else span + ' ago'})"


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Preflight:
    """Runs every check against one environment; `rows` holds the results in order."""

    def __init__(self, cfg: EnvironmentConfig, clients: Clients, now: datetime | None = None) -> None:
        self.cfg = cfg
        self.c = clients
        self.now = now or datetime.now(UTC)
        self.rows: list[Row] = []
        self.az_names: dict[str, str] = {}
        self._sagemaker_applied: dict[str, float] | None = None
        self._sagemaker_defaults: dict[str, float] | None = None
        self._own_cluster_counts: dict[str, int] = {}  # ml type -> instances this env's cluster runs now

    def _missing(self, what: str, exc: ClientError) -> str:
        return f"{what} does not exist in {self.cfg.region} for this account ({error_code(exc)})"

    def add(self, status: Status, subject: str, check: str, reason: str) -> None:
        self.rows.append(Finding(subject, LEVEL_OF[status], reason, check))

    def run(self) -> list[Row]:
        for step in (
            self.account,
            self.availability_zones,
            self.offerings,
            self.reservations,
            self.block_schedules,
            self.training_plans,
            self.ec2_quotas,
            self.sagemaker_quotas,
            self.hyperpod_account_quotas,
            self.subnet_addresses,
            self.network_interface_quota,
        ):
            self._guarded(step)
        return self.rows

    def _guarded(self, step: Callable[[], None]) -> None:
        """A step whose AWS call is denied or fails becomes a FAIL row, not a traceback."""
        try:
            step()
        except (ClientError, BotoCoreError) as exc:
            problem = access_problem(exc)
            if problem is not None:
                raise problem from None
            name = step.__name__.replace("_", " ")
            if isinstance(exc, ClientError):
                op = exc.operation_name
                self.add("FAIL", name, "AWS call", f"{op} failed: {error_code(exc)}: {exc.response.get('Error', {}).get('Message', '')}")
            else:
                self.add("FAIL", name, "AWS call", str(exc))

    # ----------------------------------------------------------------------------------------

    def account(self) -> None:
        account = self.c.sts.get_caller_identity()["Account"]
        if account == self.cfg.account:
            self.add("PASS", f"account {account}", "credentials", "credentials are for the config's account")
        else:
            self.add(
                "FAIL", f"account {account}", "credentials", f"credentials are for account {account}, the config is for {self.cfg.account}"
            )

    def availability_zones(self) -> None:
        zones = self.c.ec2.describe_availability_zones()["AvailabilityZones"]
        self.az_names = {z["ZoneId"]: z["ZoneName"] for z in zones}
        have = ", ".join(sorted(self.az_names))
        for az_id in self.cfg.network.az_ids:
            compute = " (compute AZ)" if az_id == self.cfg.network.compute_az_id else ""
            if az_id in self.az_names:
                self.add("PASS", f"AZ {az_id}{compute}", "AZ ID maps to a zone", f"{az_id} is {self.az_names[az_id]} in this account")
            else:
                self.add(
                    "FAIL",
                    f"AZ {az_id}{compute}",
                    "AZ ID maps to a zone",
                    f"{az_id} is not a zone of {self.cfg.region} in this account (have: {have})",
                )

    def offerings(self) -> None:
        az = self.cfg.network.compute_az_id
        types = sorted({catalog.normalize_instance_type(g.instance_type) for _, g in _groups(self.cfg)})
        if not types:
            return
        offered = self._offered(types, location=az)
        for instance_type in types:
            if instance_type in offered:
                self.add("PASS", instance_type, f"offered in {az}", f"{instance_type} is offered in {az}")
                continue
            elsewhere = sorted(self._offered([instance_type], location=None).get(instance_type, set()))
            where = f"offered in: {', '.join(elsewhere)}" if elsewhere else f"not offered anywhere in {self.cfg.region}"
            self.add("FAIL", instance_type, f"offered in {az}", f"{instance_type} is not offered in {az} ({where})")

    def _offered(self, types: list[str], location: str | None) -> dict[str, set[str]]:
        filters = [{"Name": "instance-type", "Values": types}]
        if location:
            filters.append({"Name": "location", "Values": [location]})
        found: dict[str, set[str]] = defaultdict(set)
        paginator = self.c.ec2.get_paginator("describe_instance_type_offerings")
        for page in paginator.paginate(LocationType="availability-zone-id", Filters=filters):
            for offer in page["InstanceTypeOfferings"]:
                found[offer["InstanceType"]].add(offer["Location"])
        return found

    # ----------------------------------------------------------------------------------------

    def reservations(self) -> None:
        for kind, group in _groups(self.cfg):
            cap = group.capacity
            if cap.type == "odcr" and cap.end_date is not None:
                self._check_odcr_end(group.name, cap.end_date)
            if cap.type not in ("reservation", "capacity-block"):
                continue
            total = 0
            all_found = True
            found: dict[str, dict[str, Any]] = {}
            for rid in cap.reservation_ids or []:
                reservation = self._reservation(rid)
                if reservation is None:
                    all_found = False
                    continue
                found[rid] = reservation
                total += int(reservation.get("TotalInstanceCount", 0))
                self._check_reservation(kind, group, rid, reservation)
            self._check_one_reservation_type(group, found)
            subject = f"group {group.name}"
            need = _count(group)
            if all_found and total < need:
                self.add("FAIL", subject, "reserved count", f"its reservations hold {total} instances; the group needs {need}")
            elif all_found:
                self.add("PASS", subject, "reserved count", f"its reservations hold {total} instances for {need}")

    def _check_one_reservation_type(self, group: Group, found: dict[str, dict[str, Any]]) -> None:
        """Several reservations of one group form one capacity reservation resource group, which
        may hold On-Demand Capacity Reservations and Capacity Blocks alike; but fminfra's launch
        template sets one market type per group (capacity-block or none), so its launches use one
        kind and a group that mixes them FAILs, naming each kind
        (docs/facts/capacity.md#capacity-reservation-group-one-type)."""
        if len(found) < 2:
            return
        blocks = sorted(rid for rid, r in found.items() if r.get("ReservationType") == "capacity-block")
        odcrs = sorted(rid for rid in found if rid not in blocks)
        subject, check = f"group {group.name}", "one reservation type"
        if blocks and odcrs:
            self.add(
                "FAIL",
                subject,
                check,
                f"its reservations mix On-Demand Capacity Reservations ({', '.join(odcrs)}) and Capacity Blocks ({', '.join(blocks)}); "
                "fminfra launches a group with one market type (capacity-block or none), so it uses only one kind: give each kind its own group",
            )
        else:
            kind = "Capacity Blocks" if blocks else "On-Demand Capacity Reservations"
            self.add("PASS", subject, check, f"its {len(found)} reservations are all {kind}")

    def _check_odcr_end(self, name: str, end_date: datetime) -> None:
        subject = f"group {name}"
        if end_date <= self.now:
            self.add(
                "FAIL",
                subject,
                "odcr end_date ahead",
                f"end_date {_when(end_date, self.now)} has passed: EC2 cannot create the reservation",
            )
        else:
            self.add("PASS", subject, "odcr end_date ahead", f"the reservation the stack creates ends {_when(end_date, self.now)}")

    def _reservation(self, rid: str) -> dict[str, Any] | None:
        try:
            found = self.c.ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
        except ClientError as exc:
            if error_code(exc).startswith("InvalidCapacityReservationId"):
                self.add(
                    "FAIL",
                    f"reservation {rid}",
                    "exists",
                    self._missing(rid, exc),
                )
                return None
            raise
        if not found:
            self.add("FAIL", f"reservation {rid}", "exists", f"{rid} does not exist in {self.cfg.region} for this account")
            return None
        return dict(found[0])

    def _check_reservation(self, kind: str, group: Group, rid: str, r: dict[str, Any]) -> None:
        subject = f"reservation {rid}"
        expected_type = catalog.normalize_instance_type(group.instance_type)
        compute = self.cfg.network.compute_az_id
        problems: list[str] = []
        if r.get("InstanceType") != expected_type:
            problems.append(f"is for {r.get('InstanceType')}, group {group.name} runs {expected_type}")
        az_id = r.get("AvailabilityZoneId") or "?"
        if az_id != compute:
            az_name = r.get("AvailabilityZone", "?")
            problems.append(
                f"is in {az_id} ({az_name}), but compute_az_id is {compute} ({self.az_names.get(compute, '?')}); instances cannot use it from the compute subnet"
            )
        if r.get("InstancePlatform") != LINUX_PLATFORM:
            problems.append(f"is for platform {r.get('InstancePlatform')!r}; the nodes run {LINUX_PLATFORM}")
        if r.get("Tenancy", "default") != "default":
            problems.append(f"has tenancy {r.get('Tenancy')}; the nodes use default tenancy")
        is_block = r.get("ReservationType") == "capacity-block"
        if group.capacity.type == "capacity-block" and not is_block:
            problems.append("is not a Capacity Block; use capacity type reservation")
        if group.capacity.type == "reservation" and is_block:
            problems.append("is a Capacity Block; use capacity type capacity-block (launches need market type capacity-block)")
        if group.capacity.type == "reservation" and (
            placement := reservation_placement_problem(r.get("PlacementGroupArn"), self.cfg.compute.placement_of(group))
        ):
            problems.append(placement)
        if problems:
            for p in problems:
                self.add("FAIL", subject, "matches the group", f"{rid} {p}")
        else:
            self.add(
                "PASS",
                subject,
                "matches the group",
                f"{r['InstanceType']}, {LINUX_PLATFORM}, {az_id}, default tenancy, {r.get('TotalInstanceCount')} instances",
            )
        self._check_reservation_time(group, rid, r, is_block)

    def _check_reservation_time(self, group: Group, rid: str, r: dict[str, Any], is_block: bool) -> None:
        subject = f"reservation {rid}"
        state = r.get("State", "?")
        start = _aware(r["StartDate"]) if r.get("StartDate") else None
        end = _aware(r["EndDate"]) if r.get("EndDate") else None
        ends = f", ends {_when(end, self.now)}" if end else ", open-ended"
        check = "covers now or starts soon" if is_block else "active"
        if state == "active":
            self.add("PASS", subject, check, f"active{ends}")
        elif state == "scheduled" and start is not None:
            soon = start - self.now <= STARTS_SOON
            self.add("PASS" if soon else "WARN", subject, check, f"scheduled: starts {_when(start, self.now)}{ends}")
        elif state in ("pending", "payment-pending", "assessing", "delayed"):
            self.add("WARN", subject, check, f"state {state}{ends}")
        else:
            self.add("FAIL", subject, check, f"state {state}{ends}: nothing can launch into it")
        cap = group.capacity
        if group.capacity.type != "capacity-block" or cap.starts_at is None or cap.ends_at is None:
            return
        if start is not None and end is not None and (cap.starts_at != start or cap.ends_at != end):
            extended = cap.starts_at == start and end > cap.ends_at
            self.add(
                "FAIL",
                subject,
                "window matches the config",
                f"the block runs {utc_timestamp(start)} to {utc_timestamp(end)}; the config says {utc_timestamp(cap.starts_at)} to {utc_timestamp(cap.ends_at)}"
                + (f" (the block was extended: set ends_at to {utc_timestamp(end)})" if extended else ""),
            )

    # ----------------------------------------------------------------------------------------

    def block_schedules(self) -> None:
        """What a deploy now does to each ec2 Capacity Block group's scheduled actions.

        CloudFormation creates and updates them with PutScheduledUpdateGroupAction, which refuses
        a start time in the past; Auto Scaling drops a one-time action once it has run; and an
        update that leaves an action's properties as they are makes no call for it
        (docs/facts/capacity.md#asg-scheduled-action-past-and-run). So a redeploy inside a
        running block is fine as long as it leaves the block's actions alone, and the next
        block's window puts both actions again."""
        if self.cfg.compute.hyperpod:
            return
        for group in self.cfg.compute.instance_groups:
            cap = group.capacity
            if cap.type == "capacity-block" and cap.starts_at is not None and cap.ends_at is not None:
                self._check_block_schedule(group, cap.starts_at, scale_in_time(cap.ends_at, cap.drain))

    def _check_block_schedule(self, group: InstanceGroupConfig, starts_at: datetime, scale_in_at: datetime) -> None:
        subject, check = f"group {group.name}", "block schedule on deploy"
        start, end = utc_timestamp(starts_at), utc_timestamp(scale_in_at)
        deployed, pending = self._deployed_schedule(self.cfg.physical_name(group.name))
        if deployed is None:
            if starts_at > self.now:
                self.add("PASS", subject, check, f"not deployed yet: the deploy creates BlockStart at {start} and BlockEnd at {end}")
            else:
                self.add(
                    "FAIL",
                    subject,
                    check,
                    f"starts_at {start} has passed and the group is not deployed: creating BlockStart would put a scheduled "
                    "action in the past, which Auto Scaling refuses. Deploy before a block starts; to use a block already "
                    "running, deploy without starts_at/ends_at and scale by hand (docs/capacity.md)",
                )
            return
        ins = sorted(_aware(a["StartTime"]) for a in pending if int(a.get("DesiredCapacity", 0)) == 0)
        outs = [_aware(a["StartTime"]) for a in pending if int(a.get("DesiredCapacity", 0)) > 0]
        running_block_end = ins[0] if ins and not outs else None  # its BlockStart has run
        if starts_at > self.now:
            if running_block_end is not None and running_block_end != scale_in_at:
                self.add(
                    "FAIL",
                    subject,
                    check,
                    f"the running block's scale-in at {utc_timestamp(running_block_end)} has not run: this deploy moves it to "
                    f"{end}, and the running block would neither scale in nor drain before EC2 reclaims it; deploy the next "
                    f"block's window after {utc_timestamp(running_block_end)}",
                )
            else:
                self.add("PASS", subject, check, f"the deploy puts BlockStart at {start} and BlockEnd at {end}")
            return
        same_window = running_block_end == scale_in_at or (not pending and scale_in_at <= self.now)
        # An extended block (PurchaseCapacityBlockExtension: docs/facts/capacity.md#capacity-block-extension)
        # keeps its start and ends later: only BlockEnd's start time changes, to a time still ahead,
        # which PutScheduledUpdateGroupAction accepts; BlockStart's properties stay, so CloudFormation
        # makes no call for it (docs/facts/capacity.md#asg-scheduled-action-past-and-run).
        extended = running_block_end is not None and running_block_end < scale_in_at and scale_in_at > self.now
        if extended and int(deployed["MaxSize"]) == group.count:
            assert running_block_end is not None
            self.add(
                "PASS",
                subject,
                check,
                f"the block ends later than deployed (extended): the deploy moves BlockEnd from {utc_timestamp(running_block_end)} "
                f"to {end} and leaves BlockStart ({start}, has run) and the group's size as they are",
            )
        elif not same_window:
            self.add(
                "FAIL",
                subject,
                check,
                f"starts_at {start} has passed and the deployed group's schedule is another one (no pending scale-in at "
                f"{end}): the deploy would put BlockStart in the past, which Auto Scaling refuses. Give the next block's "
                "window, or deploy before a block starts",
            )
        elif int(deployed["MaxSize"]) != group.count:
            self.add(
                "FAIL",
                subject,
                check,
                f"count changes from {deployed['MaxSize']} to {group.count} while the block runs: CloudFormation would put "
                f"BlockStart again with its start ({start}) in the past, which Auto Scaling refuses; change count with the next block's window",
            )
        elif running_block_end is not None:
            self.add(
                "PASS",
                subject,
                check,
                f"the block runs (BlockStart at {start} has run, BlockEnd at {end} is pending): a deploy leaves both and the group's size as they are",
            )
        else:
            self.add(
                "PASS",
                subject,
                check,
                f"this block's scale-in at {end} has passed and nothing is pending: a deploy with the deployed window leaves "
                "the schedule as it is; give the next block's window before it starts",
            )

    def _deployed_schedule(self, group_name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The deployed Auto Scaling group (None when there is none) and its scheduled actions that
        have not run (DescribeScheduledActions lists only those)."""
        if self.c.autoscaling is None:
            return None, []
        groups = self.c.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])["AutoScalingGroups"]
        if not groups:
            return None, []
        actions: list[dict[str, Any]] = []
        for page in self.c.autoscaling.get_paginator("describe_scheduled_actions").paginate(AutoScalingGroupName=group_name):
            actions.extend(page["ScheduledUpdateGroupActions"])
        return groups[0], actions

    # ----------------------------------------------------------------------------------------

    def training_plans(self) -> None:
        for _, group in _groups(self.cfg):
            arn = group.capacity.training_plan_arn
            if group.capacity.type != "training-plan" or not arn:
                continue
            name = arn.rsplit("/", 1)[-1]
            subject = f"training plan {name}"
            try:
                plan = self.c.sagemaker.describe_training_plan(TrainingPlanName=name)
            except ClientError as exc:
                if error_code(exc) in ("ResourceNotFound", "ValidationException"):
                    self.add("FAIL", subject, "exists", self._missing(arn, exc))
                    continue
                raise
            self._check_training_plan(group, subject, plan)

    def _check_training_plan(self, group: Group, subject: str, plan: dict[str, Any]) -> None:
        ml_type = catalog.get(group.instance_type).hyperpod_name
        need = _count(group)
        problems: list[str] = []
        if "hyperpod-cluster" not in plan.get("TargetResources", []):
            problems.append(f"targets {', '.join(plan.get('TargetResources', [])) or 'nothing'}, not hyperpod-cluster")
        summaries = plan.get("ReservedCapacitySummaries", [])
        types = sorted({s.get("InstanceType") for s in summaries})
        if types != [ml_type]:
            problems.append(f"reserves {', '.join(map(str, types)) or 'no instances'}; group {group.name} runs {ml_type}")
        if int(plan.get("TotalInstanceCount", 0)) < need:
            problems.append(f"holds {plan.get('TotalInstanceCount', 0)} instances; group {group.name} needs {need}")
        zones = sorted({s.get("AvailabilityZoneId") for s in summaries if s.get("AvailabilityZoneId")})
        compute = self.cfg.network.compute_az_id
        if zones and zones != [compute]:
            problems.append(f"is in {', '.join(zones)}, but compute_az_id is {compute}")
        for p in problems:
            self.add("FAIL", subject, "matches the group", p)
        if not problems:
            self.add(
                "PASS",
                subject,
                "matches the group",
                f"{ml_type}, {plan.get('TotalInstanceCount')} instances, {', '.join(zones) or 'AZ not reported'}",
            )
        status = plan.get("Status", "?")
        start = _aware(plan["StartTime"]) if plan.get("StartTime") else None
        end = _aware(plan["EndTime"]) if plan.get("EndTime") else None
        ends = f", ends {_when(end, self.now)}" if end else ""
        if status == "Active" and (end is None or end > self.now):
            self.add("PASS", subject, "covers now", f"active{ends}")
        elif status in ("Scheduled", "Pending") and start is not None:
            self.add(
                "PASS" if start - self.now <= STARTS_SOON else "WARN",
                subject,
                "covers now",
                f"{status.lower()}: starts {_when(start, self.now)}{ends}",
            )
        elif status in ("Scheduled", "Pending"):
            self.add("WARN", subject, "covers now", f"{status.lower()}{ends}")
        else:
            self.add("FAIL", subject, "covers now", f"status {status}{ends}: HyperPod cannot place nodes on it")

    # ----------------------------------------------------------------------------------------

    def ec2_quotas(self) -> None:
        """On-Demand vCPU quotas for ec2 groups and EKS inference node groups (HyperPod uses
        SageMaker's quotas instead)."""
        need: dict[str, int] = defaultdict(int)
        groups_by_code: dict[str, list[str]] = defaultdict(list)
        for kind, group in _groups(self.cfg):
            if kind == "hyperpod":
                continue
            spec = catalog.get(group.instance_type)
            quota = EC2_VCPU_QUOTAS.get(spec.family[0])
            if quota is None:
                continue
            if group.capacity.type == "capacity-block":
                # Capacity Blocks are purchased capacity; whether they also draw on the On-Demand
                # vCPU quota is unverified (docs/facts/capacity.md#capacity-block-vcpu-quota), so they are left out of the sum and said so.
                self.add("WARN", f"group {group.name}", "EC2 vCPU quota", "Capacity Block group left out of the On-Demand vCPU sum")
                continue
            if spec.vcpus is None:
                self.add(
                    "WARN",
                    f"group {group.name}",
                    "EC2 vCPU quota",
                    f"the catalog has no vCPU count for {spec.name}; check {quota[1]} by hand",
                )
                continue
            need[quota[0]] += spec.vcpus * _count(group)
            groups_by_code[quota[0]].append(group.name)
        in_use = self._on_demand_vcpus_in_use() if need else {}
        reserved = self._unused_reservation_vcpus() if need else {}
        for code, vcpus in sorted(need.items()):
            name = next(n for c, n in EC2_VCPU_QUOTAS.values() if c == code)
            subject = f"quota {name}"
            value = self._quota_value("ec2", code)
            groups = ", ".join(groups_by_code[code])
            others, held = in_use.get(code, 0), reserved.get(code, 0)
            used = f"; {others} vCPUs already run outside this environment" if others else ""
            used += f"; {held} vCPUs are held by unused reservations outside this environment" if held else ""
            text = f"{groups} need {vcpus} vCPUs{used}; the quota ({code}) is {value:g}"
            self._quota_row(vcpus + others + held <= value, subject, "EC2 vCPU quota", text)

    def sagemaker_quotas(self) -> None:
        """SageMaker's per-instance-type cluster quotas for HyperPod groups (and the Slurm
        controller and login nodes)."""
        if not self.cfg.compute.hyperpod:
            return
        need: dict[str, int] = defaultdict(int)
        for group in self.cfg.compute.instance_groups:
            need[catalog.get(group.instance_type).hyperpod_name] += group.count
        slurm = self.cfg.compute.slurm
        if slurm is not None:
            need[slurm.controller.instance_type] += 1
            if slurm.login.count:
                need[slurm.login.instance_type] += slurm.login.count
        quotas = {name: value for name in (f"{t} for cluster usage" for t in need) if (value := self._sagemaker_quota(name)) is not None}
        for ml_type, count in sorted(need.items()):
            quota_name = f"{ml_type} for cluster usage"
            subject = f"quota {quota_name}"
            if quota_name not in quotas:
                self.add(
                    "FAIL",
                    subject,
                    "SageMaker cluster quota",
                    f"no SageMaker quota named {quota_name!r} in {self.cfg.region}: the type is not available to HyperPod here",
                )
            elif count <= quotas[quota_name]:
                self.add("PASS", subject, "SageMaker cluster quota", f"needs {count}; the quota is {quotas[quota_name]:g}")
            else:
                self.add(
                    "FAIL",
                    subject,
                    "SageMaker cluster quota",
                    f"needs {count}; the quota is {quotas[quota_name]:g}: request an increase in Service Quotas",
                )

    def _sagemaker_quota(self, name: str) -> float | None:
        """A SageMaker quota by name: the applied value, else AWS's default (a quota nobody raised
        has no applied value and is absent from ListServiceQuotas), else None."""
        if self._sagemaker_applied is None:
            self._sagemaker_applied = self._list_quotas("list_service_quotas")
        if name in self._sagemaker_applied:
            return self._sagemaker_applied[name]
        if self._sagemaker_defaults is None:
            self._sagemaker_defaults = self._list_quotas("list_aws_default_service_quotas")
        return self._sagemaker_defaults.get(name)

    def _list_quotas(self, operation: str) -> dict[str, float]:
        found: dict[str, float] = {}
        for page in self.c.service_quotas.get_paginator(operation).paginate(ServiceCode="sagemaker"):
            for q in page["Quotas"]:
                found[q["QuotaName"]] = float(q["Value"])
        return found

    def hyperpod_account_quotas(self) -> None:
        """HyperPod's per-cluster and across-clusters instance quotas, against this cluster's size
        and what the account's other clusters already run (ListClusters/DescribeCluster)."""
        if not self.cfg.compute.hyperpod:
            return
        own_name = self.cfg.physical_name("hyperpod")
        need = sum(g.count for g in self.cfg.compute.instance_groups)
        slurm = self.cfg.compute.slurm
        if slurm is not None:
            need += 1 + slurm.login.count
        others = 0
        for page in self.c.sagemaker.get_paginator("list_clusters").paginate():
            for summary in page["ClusterSummaries"]:
                if summary.get("ClusterStatus") in ("Deleting", "Failed"):
                    continue
                groups = self.c.sagemaker.describe_cluster(ClusterName=summary["ClusterName"]).get("InstanceGroups", [])
                if summary["ClusterName"] == own_name:
                    for g in groups:
                        self._own_cluster_counts[g["InstanceType"]] = self._own_cluster_counts.get(g["InstanceType"], 0) + int(
                            g.get("CurrentCount", 0)
                        )
                else:
                    others += sum(int(g.get("CurrentCount", 0)) for g in groups)
        for name, total, used in ((HYPERPOD_PER_CLUSTER_QUOTA, need, 0), (HYPERPOD_TOTAL_QUOTA, need + others, others)):
            subject = f"quota {name}"
            value = self._sagemaker_quota(name)
            in_use = f" and other clusters run {used}" if used else ""
            if value is None:
                self.add(
                    "WARN", subject, "HyperPod account quota", f"no SageMaker quota named {name!r} in {self.cfg.region}; check it by hand"
                )
            else:
                self._quota_row(
                    total <= value, subject, "HyperPod account quota", f"this cluster needs {need}{in_use}; the quota is {value:g}"
                )

    # ----------------------------------------------------------------------------------------

    def _quota_row(self, fits: bool, subject: str, check: str, text: str) -> None:
        if fits:
            self.add("PASS", subject, check, text)
        else:
            self.add("FAIL", subject, check, f"{text}: request an increase in Service Quotas")

    def _quota_value(self, service: str, code: str) -> float:
        """A quota's applied value, or AWS's default where none is applied (GetServiceQuota answers
        NoSuchResourceException then)."""
        try:
            return float(self.c.service_quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
        except ClientError as exc:
            if error_code(exc) != "NoSuchResourceException":
                raise
            return float(self.c.service_quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])

    def _own_instance_filters(self) -> list[list[dict[str, Any]]]:
        """DescribeInstances filters that find this environment's own nodes: ec2 groups by their
        Auto Scaling group name, inference node groups by their EKS node group name."""
        asgs = [self.cfg.physical_name(g.name) for g in self.cfg.compute.instance_groups if not self.cfg.compute.hyperpod]
        nodegroups = [self.cfg.physical_name(g.name) for g in self.cfg.compute.inference_node_groups]
        return [
            [{"Name": f"tag:{tag}", "Values": names}, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
            for tag, names in (("aws:autoscaling:groupName", asgs), ("eks:nodegroup-name", nodegroups))
            if names
        ]

    def _instances(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for page in self.c.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                found.extend(reservation["Instances"])
        return found

    def _own_instances(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for filters in self._own_instance_filters():
            for instance in self._instances(filters):
                seen[instance["InstanceId"]] = instance
        return list(seen.values())

    def _on_demand_vcpus_in_use(self) -> dict[str, int]:
        """vCPUs of running On-Demand P and G instances in the region that are not this
        environment's own nodes (a re-run after a deploy must not count them twice), by quota code.
        Spot and Capacity Block instances are left out (InstanceLifecycle), as the quota's name says."""
        own = {i["InstanceId"] for i in self._own_instances()}
        used: dict[str, int] = defaultdict(int)
        for instance in self._instances([{"Name": "instance-state-name", "Values": ["pending", "running"]}]):
            if instance["InstanceId"] in own or instance.get("InstanceLifecycle") in ("spot", "capacity-block"):
                continue
            family = "g" if instance["InstanceType"].startswith("vt") else instance["InstanceType"][0]
            quota = EC2_VCPU_QUOTAS.get(family)
            if quota is None:
                continue
            cpu = instance.get("CpuOptions") or {}
            spec = catalog.CATALOG.get(instance["InstanceType"])
            vcpus = spec.vcpus if spec is not None and spec.vcpus else int(cpu.get("CoreCount", 0)) * int(cpu.get("ThreadsPerCore", 1))
            used[quota[0]] += vcpus
        return dict(used)

    def _unused_reservation_vcpus(self) -> dict[str, int]:
        """vCPUs of the unused part of On-Demand Capacity Reservations in the region, by quota code:
        they count toward the On-Demand quota (`RESERVATION_QUOTA_STATES`). Left out: Capacity Blocks
        (capacity-block-vcpu-quota), the reservations this environment's groups name (its nodes launch
        into them) and those it created (tag fminfra:environment)."""
        own = {rid for _, g in self.cfg.compute.groups_with_paths() for rid in g.capacity.reservation_ids or []}
        held: dict[str, int] = defaultdict(int)
        token: str | None = None
        while True:
            page = self.c.ec2.describe_capacity_reservations(
                Filters=[{"Name": "state", "Values": list(RESERVATION_QUOTA_STATES)}], **({"NextToken": token} if token else {})
            )
            for r in page.get("CapacityReservations", []):
                tags = {t.get("Key"): t.get("Value") for t in r.get("Tags", [])}
                if r.get("ReservationType") == "capacity-block" or r["CapacityReservationId"] in own:
                    continue
                if tags.get("fminfra:environment") == self.cfg.name:
                    continue
                instance_type = str(r.get("InstanceType", ""))
                quota = EC2_VCPU_QUOTAS.get("g" if instance_type.startswith("vt") else instance_type[:1])
                spec = catalog.CATALOG.get(instance_type)
                if quota is None or spec is None or not spec.vcpus:
                    continue
                # An active reservation's running instances are counted as instances; scheduled ones hold all.
                unused = int(r.get("AvailableInstanceCount", 0)) if r.get("State") == "active" else int(r.get("TotalInstanceCount", 0))
                held[quota[0]] += unused * spec.vcpus
            token = page.get("NextToken")
            if not token:
                return dict(held)

    # ----------------------------------------------------------------------------------------

    def subnet_addresses(self) -> None:
        nodes, with_pods = self._addresses_needed()
        if nodes == 0:
            return
        plan = next(s for s in self.cfg.network.subnets() if s.compute)
        name = f"{self.cfg.physical_name()}-private-{plan.az_id}"
        found = self.c.ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": [name]}])["Subnets"]
        if found:
            subnet_id = found[0]["SubnetId"]
            free = int(found[0]["AvailableIpAddressCount"])
            # This environment's own nodes already hold addresses there; they are not new demand.
            own = sum(
                len(eni.get("PrivateIpAddresses") or [eni])
                for i in self._own_instances()
                for eni in i.get("NetworkInterfaces", [])
                if eni.get("SubnetId") == subnet_id
            )
            where = f"{subnet_id} has {free} free addresses" + (f" and {own} held by this environment's nodes" if own else "")
            free += own
        else:
            prefix = int(plan.cidr.split("/")[1])
            free = 2 ** (32 - prefix) - SUBNET_RESERVED_IPS
            where = f"not deployed yet; the planned {plan.cidr} will have {free}"
        subject = f"subnet {name}"
        if nodes > free:
            self.add("FAIL", subject, "free IP addresses", f"the nodes need up to {nodes} addresses; {where}")
        elif with_pods > free:
            self.add(
                "WARN", subject, "free IP addresses", f"the nodes need up to {nodes} addresses, with EKS pods about {with_pods}; {where}"
            )
        else:
            pods = f" ({with_pods} with EKS pods)" if with_pods != nodes else ""
            self.add("PASS", subject, "free IP addresses", f"the nodes need up to {nodes} addresses{pods}; {where}")

    def network_interface_quota(self) -> None:
        """'Network interfaces per Region' against what the nodes take (each EFA interface is one)
        plus the interfaces already in the region that are not this environment's own."""
        need, parts = _network_interfaces_needed(self.cfg)
        if need == 0:
            return
        service, code, name = ENI_QUOTA
        value = self._quota_value(service, code)
        in_region = 0
        for page in self.c.ec2.get_paginator("describe_network_interfaces").paginate():
            in_region += len(page["NetworkInterfaces"])
        own = sum(len(i.get("NetworkInterfaces", [])) for i in self._own_instances())
        own += sum(n * _interfaces_per_node(t) for t, n in self._own_cluster_counts.items())
        others = max(in_region - own, 0)
        text = f"the nodes take up to {need} ({', '.join(parts)}); {others} other interfaces exist in {self.cfg.region}; the quota ({code}) is {value:g}"
        self._quota_row(need + others <= value, f"quota {name}", "network interface quota", text)

    def _addresses_needed(self) -> tuple[int, int]:
        """(addresses the nodes take, the same plus EKS pods). ec2 nodes: one (the primary; the
        efa-only interfaces take none). HyperPod may attach EFA as `efa` interfaces with an
        address each, so it counts one per EFA interface too (an upper bound)."""
        nodes = pods = 0
        for kind, group in _groups(self.cfg):
            spec = catalog.get(group.instance_type)
            count = _count(group)
            per_node = 1 + (spec.max_efa_interfaces if kind == "hyperpod" else 0)
            nodes += count * per_node
            if kind == "eks-inference" or self.cfg.compute.orchestrator == "eks":
                pods += count * EKS_POD_IPS_PER_NODE
        slurm = self.cfg.compute.slurm
        if slurm is not None:
            nodes += 1 + slurm.login.count
        return nodes, nodes + pods


def _interfaces_per_node(instance_type: str) -> int:
    """Network interfaces one node takes: the primary and one per EFA interface (the catalog's
    launch-template layout; docs/facts/network.md#efa-launch-template-layout). Types outside the
    GPU catalog (Slurm controller and login nodes) take one."""
    spec = catalog.CATALOG.get(catalog.normalize_instance_type(instance_type))
    return 1 if spec is None else len(catalog.efa_network_interfaces(spec.name))


def _network_interfaces_needed(cfg: EnvironmentConfig) -> tuple[int, list[str]]:
    """Interfaces the environment's nodes take at full size, and the per-group arithmetic."""
    total, parts = 0, []
    for _, group in _groups(cfg):
        per_node = _interfaces_per_node(group.instance_type)
        count = _count(group)
        total += per_node * count
        parts.append(f"{group.name} {count} x {per_node}")
    slurm = cfg.compute.slurm
    if slurm is not None:
        total += 1 + slurm.login.count
        parts.append(f"Slurm controller and login {1 + slurm.login.count} x 1")
    return total, parts


def run_preflight(cfg: EnvironmentConfig, clients: Clients, now: datetime | None = None) -> list[Row]:
    """Every preflight check for one environment."""
    return Preflight(cfg, clients, now).run()


def render(cfg: EnvironmentConfig, rows: Iterable[Row]) -> str:
    rows = list(rows)
    counts = {s: sum(1 for r in rows if STATUS_OF[r.level] == s) for s in ("PASS", "WARN", "FAIL")}
    head = f"preflight {cfg.name} ({cfg.account}, {cfg.region}, compute AZ {cfg.network.compute_az_id})"
    table = format_table(["status", "subject", "check", "reason"], [[STATUS_OF[r.level], r.path, r.check, r.message] for r in rows])
    return f"{head}\n{table}\n{counts['PASS']} PASS, {counts['WARN']} WARN, {counts['FAIL']} FAIL"


def clients_for(cfg: EnvironmentConfig, profile: str | None) -> Clients:
    from fminfra.ops.aws import client, make_session

    session = make_session(region=cfg.region, profile=profile)
    return Clients(
        ec2=client(session, "ec2"),
        service_quotas=client(session, "service-quotas"),
        sagemaker=client(session, "sagemaker"),
        sts=client(session, "sts"),
        autoscaling=client(session, "autoscaling"),
    )


__all__ = ["STATUS_OF", "AwsAccessError", "Clients", "Row", "clients_for", "render", "run_preflight"]


def command(ns: argparse.Namespace) -> int:
    from fminfra.ops.common import EXIT_CHECK_FAILED, EXIT_OK, load_configs

    failed = False
    for i, (_, cfg) in enumerate(load_configs(ns.configs)):
        if i:
            print()
        rows = run_preflight(cfg, clients_for(cfg, ns.profile))
        print(render(cfg, rows))
        failed = failed or any(r.level == "error" for r in rows)
    return EXIT_CHECK_FAILED if failed else EXIT_OK
