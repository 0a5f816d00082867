"""`fminfra preflight`: parse the arguments, call `fminfra.ops.preflight.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.cli.help import PROFILE_HELP
from fminfra.ops import preflight

HELP = "read-only AWS checks of capacity, quotas and subnets before a deploy"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.add_argument("--profile", help=PROFILE_HELP)


def main(ns: argparse.Namespace) -> int:
    return preflight.command(ns)
