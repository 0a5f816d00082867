"""`fminfra plan`: parse the arguments, call `fminfra.ops.plan.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.ops import plan

HELP = "what each group will run, without synthesizing"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="+", metavar="CONFIG")


def main(ns: argparse.Namespace) -> int:
    return plan.command(ns)
