"""`fminfra capacity-blocks`: parse the arguments, call `fminfra.ops.capacity_blocks.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.capacity.rules import ULTRASERVER_TYPES
from fminfra.cli.help import PROFILE_HELP
from fminfra.ops import capacity_blocks
from fminfra.ops.common import Parser

HELP = "find and buy EC2 Capacity Blocks for ML"


def add_arguments(p: argparse.ArgumentParser) -> None:
    cb = p.add_subparsers(dest="cb_command", required=True, parser_class=Parser)
    f = cb.add_parser("find", help="list Capacity Block offerings: AZ, start, end, real duration, upfront price")
    f.add_argument("--instance-type", help="EFA training type (not p6e-gb200: use --ultraserver-type)")
    f.add_argument("--ultraserver-type", help=f"GB200 UltraServer type: {', '.join(ULTRASERVER_TYPES)} (listing only)")
    f.add_argument("--count", type=int, required=True, help="instances, 1-64 (UltraServers with --ultraserver-type)")
    f.add_argument("--duration-days", type=int, required=True, help="1-14, or a multiple of 7 up to 182")
    f.add_argument("--start-after", help="earliest start, e.g. 2027-01-10 (UTC when no zone is given)")
    u = cb.add_parser("purchase", help="buy one offering (only with --yes) and print the config snippet")
    u.add_argument("offering_id", metavar="OFFERING_ID")
    u.add_argument("--yes", action="store_true", help="confirm the purchase; without it nothing is bought")
    u.add_argument("--dry-run", action="store_true", help="ask EC2 whether the purchase would be allowed (DryRun); buys nothing")
    u.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="tag the reservations (repeatable)")
    u.add_argument("--platform", default="Linux/UNIX", help="instance platform of the block (default Linux/UNIX)")
    for q in (f, u):
        q.add_argument("--region", required=True)
        q.add_argument("--profile", help=PROFILE_HELP)


def main(ns: argparse.Namespace) -> int:
    return capacity_blocks.command(ns)
