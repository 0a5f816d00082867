"""`fminfra show`: parse the arguments, call `fminfra.ops.show.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.cli.help import CONFIG_HELP
from fminfra.ops import show

HELP = "print the effective config: every default filled in, derived values as comments"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)


def main(ns: argparse.Namespace) -> int:
    return show.command(ns)
