"""`fminfra grafana`: parse the arguments, call `fminfra.ops.grafana.command`, return its exit code."""

from __future__ import annotations

import argparse

from fminfra.ops import grafana

HELP = "Amazon Managed Grafana: `grafana sync CONFIG`"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="grafana_command", required=True)
    s = sub.add_parser("sync", help="data sources, dashboards and admin groups of the environment's Grafana workspace")
    s.add_argument("config", metavar="CONFIG")
    s.add_argument("--grafana-url", default=None, help="Grafana base URL instead of the workspace's (e.g. through a proxy)")


def main(ns: argparse.Namespace) -> int:
    return grafana.command(ns)
