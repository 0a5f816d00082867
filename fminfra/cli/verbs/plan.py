"""`fminfra plan`: parse the arguments, call `fminfra.ops.plan.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.cli.help import PROFILE_HELP
from fminfra.ops import plan

HELP = "what each group will run, without synthesizing"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.add_argument(
        "--topology",
        action="store_true",
        help="also read from EC2 (read-only) how each reserved group's reservations spread over the network, "
        "and whether a job of the group's size fits in one network domain",
    )
    p.add_argument("--profile", help=f"{PROFILE_HELP}; with --topology")


def main(ns: argparse.Namespace) -> int:
    return plan.command(ns)
