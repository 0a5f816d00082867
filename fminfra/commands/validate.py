"""`validate CONFIG...`: check config files offline; prints `FILE: ok` for each, warnings on stderr."""

from __future__ import annotations

import argparse
import sys

from fminfra.commands.common import EXIT_OK
from fminfra.config import format_warnings, load_config, resolve_config_path
from fminfra.core.errors import ConfigError

HELP = "validate config files; prints FILE: ok for each"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("configs", nargs="+", metavar="CONFIG", help="file path, or environment name for config/NAME.yaml")


def main(ns: argparse.Namespace) -> int:
    problems: list[str] = []
    for arg in ns.configs:
        path = resolve_config_path(arg)
        try:
            cfg = load_config(path)
            print(f"{path}: ok")
            for line in format_warnings(path, cfg):
                print(line, file=sys.stderr)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return EXIT_OK
