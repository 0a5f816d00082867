"""`fminfra gate`: parse the arguments, call `fminfra.ops.gate.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.ops import gate

HELP = "policy gates over a synthesized cdk.out: cdk-nag ran clean, cfn-lint, own rules; and the summary table"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="default: every file in --config-dir")
    p.add_argument("--outdir", default="cdk.out")
    p.add_argument("--config-dir", default="config")
    p.add_argument("--cfn-lint-config", default=".cfnlintrc.yaml")


def main(ns: argparse.Namespace) -> int:
    return gate.command(ns)
