"""`validate PATH...`: check config files offline; prints `FILE: ok` for each, warnings on stderr.

A PATH is an environment file, an environment name (config/NAME.yaml), a folder (every *.yaml and
*.yml in it), or a pipeline file (a mapping with `environments:`), which is validated as one,
together with the environment files it names.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fminfra.config import config_files, format_warnings, parse_config, read_yaml, resolve_config_path
from fminfra.config.pipeline import load_pipeline
from fminfra.core.errors import ConfigError
from fminfra.core.rules import repeated_environment_names
from fminfra.ops.common import EXIT_OK


def is_pipeline_file(data: object) -> bool:
    """A pipeline file is the one config-like YAML with an `environments` list at the top."""
    return isinstance(data, dict) and "environments" in data and "compute" not in data


def expand(args: list[str]) -> list[Path]:
    """The files the arguments name: folders become their YAML files, in name order."""
    paths: list[Path] = []
    for arg in args:
        path = resolve_config_path(arg)
        if path.is_dir():
            found = config_files(path)
            if not found:
                raise ConfigError([f"{path}: (folder): no config files (*.yaml, *.yml) in it"])
            paths.extend(found)
        else:
            paths.append(path)
    return paths


def validate_one(path: Path) -> tuple[str, str | None]:
    """`FILE: ok` (or `FILE: ok (pipeline: ...)`) and the environment's name (None for a pipeline
    file); ConfigError with one line per problem."""
    data = read_yaml(path)
    if is_pipeline_file(data):
        pipeline, environments = load_pipeline(path)
        names = ", ".join(e.name for e in environments)
        return f"{path}: ok (pipeline {pipeline.name}: {names})", None
    cfg = parse_config(data, str(path))
    for line in format_warnings(path, cfg):
        print(line, file=sys.stderr)
    return f"{path}: ok", cfg.name


def command(ns: argparse.Namespace) -> int:
    """Each file on its own, then the files together: one app synthesizes them all, so an
    environment name may be given once (`repeated_environment_names`)."""
    problems: list[str] = []
    names: dict[str, str] = {}
    passed: dict[str, str] = {}
    for path in {p.resolve(): p for p in expand(ns.configs)}.values():
        try:
            line, name = validate_one(path)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        passed[str(path)] = line
        if name is not None:
            names[str(path)] = name
    repeated = repeated_environment_names(names)
    # a file that repeats an earlier file's name is not ok: its line is the problem, not "ok"
    refused = {file for file in passed if any(p.startswith(f"{file}: ") for p in repeated)}
    for file, line in passed.items():
        if file not in refused:
            print(line)
    problems.extend(repeated)
    if problems:
        raise ConfigError(problems)
    return EXIT_OK
