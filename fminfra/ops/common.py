"""What the commands share: exit codes, the usage error, loading several configs at once."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from fminfra.config import EnvironmentConfig, load_config, resolve_config_path
from fminfra.core.errors import ConfigError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are UsageErrors (one line, exit 2), not argparse's exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def load_configs(args: Sequence[str]) -> list[tuple[Path, EnvironmentConfig]]:
    """Load every CONFIG argument; ConfigError collecting the problems of all of them."""
    loaded: list[tuple[Path, EnvironmentConfig]] = []
    problems: list[str] = []
    for arg in args:
        path = resolve_config_path(arg)
        try:
            loaded.append((path, load_config(path)))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return loaded
