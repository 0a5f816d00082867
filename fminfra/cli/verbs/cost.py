"""`fminfra cost`: parse the arguments, call `fminfra.ops.cost.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.cli.help import CONFIG_HELP, OUTDIR_HELP
from fminfra.core.rules import HOURS_PER_MONTH_MAX
from fminfra.ops import cost
from fminfra.ops.common import number_argument
from fminfra.ops.cost import HOURS_PER_MONTH

HELP = "what an environment costs per hour, per month and per GPU-hour, from its synthesized templates"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--outdir", default="cdk.out", help=OUTDIR_HELP)
    p.add_argument("--live", action="store_true", help="prices from the AWS Price List API (needs credentials)")
    hours = number_argument(float, low=0, high=HOURS_PER_MONTH_MAX, low_allowed=False)
    users, samples = number_argument(int, low=0), number_argument(float, low=0)
    p.add_argument(
        "--hours-per-month", type=hours, default=HOURS_PER_MONTH, help=f"more than 0, at most {HOURS_PER_MONTH_MAX} (default 730)"
    )
    p.add_argument("--grafana-editors", type=users, default=1, help="assumption: Grafana editor users (default 1)")
    p.add_argument("--grafana-viewers", type=users, default=0, help="assumption: Grafana viewer users (default 0)")
    p.add_argument(
        "--amp-samples-per-second", type=samples, default=10000.0, help="assumption: samples/s ingested into AMP (default 10000)"
    )
    p.add_argument("--baseline", metavar="DIR", help="also price these templates (e.g. baselines/ENV) and show before -> after")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the estimate as JSON")
    out.add_argument("--markdown", action="store_true", help="a Markdown block for a pull request summary (before -> after)")


def main(ns: argparse.Namespace) -> int:
    return cost.command(ns)
