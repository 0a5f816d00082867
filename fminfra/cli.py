"""`python -m fminfra COMMAND ...`: validate, schema, plan, gate (and later: preflight, guard, ...).

Exit codes, for every command: 0 success, 1 a check the command runs failed, 2 bad input (one
line per problem, `FILE: field.path: message`, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from fminfra.config import EnvironmentConfig, config_files, load_config, resolve_config_path
from fminfra.errors import ConfigError, ValidationError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
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


def cmd_validate(ns: argparse.Namespace) -> int:
    problems: list[str] = []
    for arg in ns.configs:
        path = resolve_config_path(arg)
        try:
            load_config(path)
            print(f"{path}: ok")
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return EXIT_OK


def cmd_schema(ns: argparse.Namespace) -> int:
    print(json.dumps(EnvironmentConfig.model_json_schema(by_alias=True), indent=2))
    return EXIT_OK


def cmd_plan(ns: argparse.Namespace) -> int:
    from fminfra.plan import render_plan

    for i, (_, cfg) in enumerate(load_configs(ns.configs)):
        if i:
            print()
        print(render_plan(cfg))
    return EXIT_OK


def cmd_gate(ns: argparse.Namespace) -> int:
    from fminfra.gate import run_gate

    paths = [resolve_config_path(c) for c in ns.configs] if ns.configs else config_files(Path(ns.config_dir))
    configs = {cfg.name: cfg for _, cfg in load_configs([str(p) for p in paths])}
    return run_gate(Path(ns.outdir), configs, cfn_lint_config=Path(ns.cfn_lint_config))


# Subcommands that later modules contribute register here: name -> (help, add_arguments, handler).
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
EXTRA_COMMANDS: dict[str, Command] = {}


def _register_guard() -> None:
    from fminfra.guard import add_guard_arguments, run_guard_command

    EXTRA_COMMANDS["guard"] = (
        "fail when a stateful resource (bucket, key, FSx, cluster, VPC, ...) would be deleted or replaced",
        add_guard_arguments,
        run_guard_command,
    )


_register_guard()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m fminfra", description=__doc__.split("\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("validate", help="validate config files; prints FILE: ok for each")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help="file path, or environment name for config/NAME.yaml")
    p.set_defaults(handler=cmd_validate)
    p = sub.add_parser("schema", help="print the JSON Schema of the config")
    p.set_defaults(handler=cmd_schema)
    p = sub.add_parser("plan", help="what each group will run, without synthesizing")
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.set_defaults(handler=cmd_plan)
    p = sub.add_parser("gate", help="own rules + cfn-lint over a synthesized cdk.out, and the summary table")
    p.add_argument("configs", nargs="*", metavar="CONFIG", help="default: every file in --config-dir")
    p.add_argument("--outdir", default="cdk.out")
    p.add_argument("--config-dir", default="config")
    p.add_argument("--cfn-lint-config", default=".cfnlintrc.yaml")
    p.set_defaults(handler=cmd_gate)
    for name, (help_text, add_arguments, handler) in EXTRA_COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        add_arguments(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        ns = build_parser().parse_args(argv)
        return int(ns.handler(ns))
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValidationError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
