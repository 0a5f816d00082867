"""fminfra's command line: validate, plan and check environments, and operate them.

`python -m fminfra COMMAND ...` (also installed as `fminfra`) parses arguments and dispatches to
the module of each verb in `fminfra/cli/verbs/` (which parses, makes one call into `fminfra/ops/`,
and returns the exit code).

Exit codes, for every command: 0 success, 1 a check the command runs failed, 2 bad input (one
line per problem, `FILE: field.path: message`, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from fminfra.core.errors import ConfigError, ValidationError
from fminfra.core.resources import use_bundled_node
from fminfra.ops.common import EXIT_BAD_INPUT, Parser, UsageError

# Verb -> module in fminfra.cli.verbs, in the order `--help` lists them.
COMMANDS = {
    "validate": "validate",
    "schema": "schema",
    "show": "show",
    "init": "init",
    "plan": "plan",
    "gate": "gate",
    "preflight": "preflight",
    "capacity-blocks": "capacity_blocks",
    "grafana": "grafana",
    "guard": "guard",
    "cost": "cost",
    "diagram": "diagram",
    "accept": "accept",
    "accept-remote": "accept_remote",
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m fminfra", description=__doc__.split("\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for verb, module_name in COMMANDS.items():
        module = importlib.import_module(f"fminfra.cli.verbs.{module_name}")
        p = sub.add_parser(verb, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(handler=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    use_bundled_node()  # before any verb imports aws-cdk-lib (jsii starts Node.js then)
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
    except BrokenPipeError:
        # the reader went away (`... --dry-run | head`): no traceback; stdout is closed, so point it
        # at /dev/null for the interpreter's final flush, and exit as a shell pipe does (128 + SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
