"""`init`: write a commented starter config from a few flags; it passes `validate` as written.

The file is validated before it is written: flags that make an invalid config (an instance type
HyperPod does not offer, a training plan in another region) are reported as `validate` would, and
nothing is written. An existing file is never overwritten.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from fminfra.config import parse_config
from fminfra.core.errors import ConfigError
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION
from fminfra.ops.common import EXIT_OK, UsageError

ORCHESTRATORS = ("slurm", "eks", "ec2", "none")
# Flag -> the capacity field it writes, and the capacity types that take it (CapacityConfig's rules).
CAPACITY_FLAGS = {
    "reservation_id": ("reservation_ids", ("reservation", "capacity-block")),
    "starts_at": ("starts_at", ("capacity-block",)),
    "ends_at": ("ends_at", ("capacity-block",)),
    "training_plan_arn": ("training_plan_arn", ("training-plan",)),
}
# The field of the config `starter` writes -> the flag that set it, for errors in the user's words.
FIELD_FLAGS = (
    (re.compile(r"^name$"), "--name"),
    (re.compile(r"^account$"), "--account"),
    (re.compile(r"^(region|network\..*)$"), "--region"),
    (re.compile(r"^compute\.orchestrator$"), "--orchestrator"),
    (re.compile(r"^compute\.\w+\[0\]\.instance_type$"), "--instance-type"),
    (re.compile(r"^compute\.\w+\[0\]\.(count|min_size|desired_size|max_size)$"), "--count"),
    (re.compile(r"^compute\.\w+\[0\]\.capacity\.type$"), "--capacity-type"),
    (re.compile(r"^compute\.\w+\[0\]\.capacity\.reservation_ids(\[\d+\])?$"), "--reservation-id"),
    (re.compile(r"^compute\.\w+\[0\]\.capacity\.starts_at$"), "--starts-at"),
    (re.compile(r"^compute\.\w+\[0\]\.capacity\.ends_at$"), "--ends-at"),
    (re.compile(r"^compute\.\w+\[0\]\.capacity\.training_plan_arn$"), "--training-plan-arn"),
)
_STARTER = "<init>"  # the file name the starter is validated under, replaced in its problems


def flag_problem(line: str) -> str:
    """A problem of the starter config (`<init>: FIELD: message`) in the flags' words:
    `--flag: message`, or `the config the flags make: FIELD: message` where no flag set the field."""
    field, _, message = line.removeprefix(f"{_STARTER}: ").partition(": ")
    flag = next((flag for rule, flag in FIELD_FLAGS if rule.match(field)), None)
    return f"{flag}: {message}" if flag else f"the config these flags make: {field}: {message}"


REQUIRED_FLAGS = {"reservation": ("reservation_id",), "capacity-block": ("reservation_id",), "training-plan": ("training_plan_arn",)}


def starter(ns: argparse.Namespace) -> str:
    """The config text, with a comment on each choice a user should review."""
    if ns.region not in AZ_ID_PREFIX_BY_REGION:
        raise UsageError(f"--region: unknown region {ns.region!r}; known: {', '.join(AZ_ID_PREFIX_BY_REGION)}")
    prefix = AZ_ID_PREFIX_BY_REGION[ns.region]
    capacity = _capacity(ns)
    lines = [
        f"# {ns.name}: written by `fminfra init`; `python -m fminfra validate` and `plan` check it offline.",
        "# Every field and its default: `python -m fminfra show THIS_FILE`; reference: docs/config.md.",
        "version: 1",
        f"name: {ns.name}",
        f'account: "{ns.account}"',
        f"region: {ns.region}",
        "removal_policy: retain          # destroy only for throw-away environments",
        "network:",
        "  cidr: 10.0.0.0/16",
        "  # AZ IDs, not names: list this account's with",
        f"  #   aws ec2 describe-availability-zones --region {ns.region} --query 'AvailabilityZones[].[ZoneName,ZoneId]'",
        f"  az_ids: [{prefix}-az1, {prefix}-az2]",
        f"  compute_az_id: {prefix}-az1    # the AZ where your GPU capacity is (reservation, Capacity Block, training plan)",
        "compute:",
    ]
    group = {"instance_type": ns.instance_type}
    if ns.orchestrator == "none":
        lines += [
            "  # no training cluster: an EKS cluster with GPU node groups for inference",
            "  inference_node_groups:",
            "    - "
            + _flow({"name": "serve", **group, "min_size": ns.count, "desired_size": ns.count, "max_size": ns.count, "capacity": capacity}),
        ]
    else:
        lines += [
            f"  orchestrator: {ns.orchestrator}",
            "  instance_groups:",
            "    - " + _flow({"name": "workers", **group, "count": ns.count, "capacity": capacity}),
        ]
    lines += [
        "# storage: a data bucket and FSx for Lustre linked to it (docs/storage.md); omitted: none",
        "# observability: AMP and alert rules are on by default; Grafana is off (docs/observability.md)",
    ]
    return "\n".join(lines) + "\n"


def _capacity(ns: argparse.Namespace) -> dict[str, object]:
    """The group's `capacity` from the flags; UsageError naming a flag its type needs or does not take."""
    for dest in REQUIRED_FLAGS.get(ns.capacity_type, ()):
        if not getattr(ns, dest, None):
            raise UsageError(f"--capacity-type {ns.capacity_type} needs --{dest.replace('_', '-')}")
    capacity: dict[str, object] = {"type": ns.capacity_type}
    for dest, (field, types) in CAPACITY_FLAGS.items():
        value = getattr(ns, dest, None)
        if value is None:
            continue
        if ns.capacity_type not in types:
            raise UsageError(f"--{dest.replace('_', '-')}: only with --capacity-type {' or '.join(types)}, got {ns.capacity_type}")
        capacity[field] = value
    return capacity


def _flow(value: dict[str, object]) -> str:
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()


def command(ns: argparse.Namespace) -> int:
    output = Path(ns.output) if ns.output else Path("config") / f"{ns.name}.yaml"
    try:
        text = starter(ns)
    except UsageError as exc:  # a flag its capacity type needs or does not take: the same form as the config's problems
        raise UsageError(f"init: {exc} (nothing written)") from None
    try:
        parse_config(yaml.safe_load(text), _STARTER)
    except ConfigError as exc:  # nothing written; the problems in the flags' words
        raise ConfigError([f"init: {flag_problem(line)} (nothing written)" for line in exc.problems]) from None
    if output.exists():
        raise UsageError(f"{output}: already exists; fminfra init never overwrites a file (give --output)")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    print(f"{output}: written; next: python -m fminfra plan {output}", file=sys.stderr)
    return EXIT_OK
