"""`fminfra guard`: parse the arguments, call `fminfra.ops.guard.command`, return its exit code."""

from __future__ import annotations

import argparse
from typing import Any

from fminfra.cli.help import CONFIG_HELP
from fminfra.ops import guard

HELP = "fail when a stateful resource (bucket, key, FSx, cluster, VPC, ...) would be deleted or replaced"


def add_arguments(p: Any) -> None:
    p.add_argument("config", nargs="?", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--baseline", metavar="DIR", help="templates before the change (default: baselines/<env>/)")
    p.add_argument("--templates", metavar="DIR", help="templates after the change (default: synthesize CONFIG)")
    p.add_argument("--allow", action="append", default=[], metavar="LOGICAL_ID", help="let this resource's change through")
    p.add_argument("--update-baseline", action="store_true", help="write the AFTER templates to the baseline folder")
    p.add_argument("--deployed", action="store_true", help="baseline = the deployed stacks' templates (needs credentials)")
    p.add_argument("--change-set", action="store_true", help="CloudFormation change sets decide (needs credentials)")
    p.add_argument("--role-arn", metavar="ARN", help="assume this role first (e.g. the target account's CDK deploy role)")


def main(ns: argparse.Namespace) -> int:
    return guard.command(ns)
