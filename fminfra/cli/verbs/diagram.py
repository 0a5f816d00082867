"""`fminfra diagram`: parse the arguments, call `fminfra.ops.diagram.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.cli.help import CONFIG_HELP, OUTDIR_HELP
from fminfra.ops import diagram

HELP = "an architecture picture of an environment from its synthesized templates: Mermaid, SVG or PNG"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--outdir", default="cdk.out", help=OUTDIR_HELP)
    p.add_argument("--format", choices=("mermaid", "svg", "png"), default="mermaid")
    p.add_argument("--output", help="write to this file (default: standard output; png needs it)")


def main(ns: argparse.Namespace) -> int:
    return diagram.command(ns)
