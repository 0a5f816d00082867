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

from fminfra.config import EnvironmentConfig, config_files, format_warnings, load_config, resolve_config_path
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
            cfg = load_config(path)
            print(f"{path}: ok")
            for line in format_warnings(path, cfg):
                print(line, file=sys.stderr)
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


def cmd_preflight(ns: argparse.Namespace) -> int:
    from fminfra.preflight import clients_for, render, run_preflight

    failed = False
    for i, (_, cfg) in enumerate(load_configs(ns.configs)):
        if i:
            print()
        rows = run_preflight(cfg, clients_for(cfg, ns.profile))
        print(render(cfg, rows))
        failed = failed or any(r.status == "FAIL" for r in rows)
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def _capacity_blocks_client(ns: argparse.Namespace) -> object:
    from fminfra.aws import client, make_session
    from fminfra.regions import AZ_ID_PREFIX_BY_REGION

    if ns.region not in AZ_ID_PREFIX_BY_REGION:
        raise UsageError(f"--region: unknown region {ns.region!r}; known: {', '.join(AZ_ID_PREFIX_BY_REGION)}")
    return client(make_session(region=ns.region, profile=ns.profile), "ec2")


def cmd_capacity_blocks(ns: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from botocore.exceptions import BotoCoreError, ClientError

    from fminfra import capacity_blocks as cb
    from fminfra import catalog
    from fminfra.aws import access_problem, error_code
    from fminfra.plan import format_table

    if ns.cb_command == "purchase" and not ns.yes:
        raise UsageError(f"capacity-blocks purchase: buying {ns.offering_id} charges its upfront fee at once; add --yes to buy it")
    instance_type, start_after = "", None  # set by find's checks below
    if ns.cb_command == "find":
        spec = catalog.CATALOG.get(catalog.normalize_instance_type(ns.instance_type))
        if spec is None or not spec.training:
            raise UsageError(
                f"--instance-type: {ns.instance_type!r} is not an EFA training type; allowed: {', '.join(catalog.TRAINING_TYPES)}"
            )
        instance_type = spec.name
        if not 1 <= ns.count <= cb.MAX_INSTANCES_PER_BLOCK:
            raise UsageError(f"--count must be 1-{cb.MAX_INSTANCES_PER_BLOCK} (instances per Capacity Block), got {ns.count}")
        if duration := cb.duration_problem(ns.duration_days):
            raise UsageError(duration)
        if ns.start_after:
            try:
                start_after = datetime.fromisoformat(ns.start_after)
            except ValueError:
                raise UsageError(
                    f"--start-after must be a date or time such as 2027-01-10 or 2027-01-10T11:30:00Z, got {ns.start_after!r}"
                ) from None
            start_after = start_after if start_after.tzinfo else start_after.replace(tzinfo=UTC)
    ec2 = _capacity_blocks_client(ns)
    try:
        if ns.cb_command == "find":
            offerings = cb.find_offerings(
                ec2, instance_type=instance_type, count=ns.count, duration_days=ns.duration_days, start_after=start_after
            )
            if not offerings:
                print(f"no Capacity Block offerings for {ns.count} x {instance_type} for {ns.duration_days} days in {ns.region}")
                return EXIT_OK
            print(
                format_table(
                    ["offering", "instance type", "count", "AZ", "AZ ID", "start", "end", "hours", "upfront price"],
                    [
                        [
                            o.offering_id,
                            o.instance_type,
                            str(o.instance_count),
                            o.availability_zone,
                            o.availability_zone_id,
                            cb.utc_timestamp(o.starts_at),
                            cb.utc_timestamp(o.ends_at),
                            str(o.duration_hours),
                            f"{o.upfront_fee} {o.currency}".strip(),
                        ]
                        for o in offerings
                    ],
                )
            )
            print(f"buy one with: python -m fminfra capacity-blocks purchase OFFERING --region {ns.region} --yes")
            return EXIT_OK
        reservation = cb.purchase(ec2, ns.offering_id, platform=ns.platform)
        print(cb.config_snippet(reservation, cb.zone_ids(ec2)))
        return EXIT_OK
    except (ClientError, BotoCoreError) as exc:
        problem = access_problem(exc)
        if problem is not None:
            raise problem from None
        if isinstance(exc, ClientError):
            print(
                f"capacity-blocks {ns.cb_command}: {exc.operation_name} failed: {error_code(exc)}: {exc.response.get('Error', {}).get('Message', '')}",
                file=sys.stderr,
            )
        else:
            print(f"capacity-blocks {ns.cb_command}: {exc}", file=sys.stderr)
        return EXIT_CHECK_FAILED


def _add_capacity_blocks_arguments(p: argparse.ArgumentParser) -> None:
    cb = p.add_subparsers(dest="cb_command", required=True, parser_class=_Parser)
    f = cb.add_parser("find", help="list Capacity Block offerings: AZ, start, end, upfront price")
    f.add_argument("--instance-type", required=True)
    f.add_argument("--count", type=int, required=True, help="instances, 1-64")
    f.add_argument("--duration-days", type=int, required=True, help="1-14, or a multiple of 7 up to 182")
    f.add_argument("--start-after", help="earliest start, e.g. 2027-01-10 (UTC when no zone is given)")
    u = cb.add_parser("purchase", help="buy one offering (only with --yes) and print the config snippet")
    u.add_argument("offering_id", metavar="OFFERING_ID")
    u.add_argument("--yes", action="store_true", help="confirm the purchase; without it nothing is bought")
    u.add_argument("--platform", default="Linux/UNIX", help="instance platform of the block (default Linux/UNIX)")
    for q in (f, u):
        q.add_argument("--region", required=True)
        q.add_argument("--profile", help="AWS profile (default: normal credential resolution)")


# Subcommands that later modules contribute register here: name -> (help, add_arguments, handler).
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
EXTRA_COMMANDS: dict[str, Command] = {}


def _grafana_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="grafana_command", required=True)
    s = sub.add_parser("sync", help="data sources, dashboards and admin groups of the environment's Grafana workspace")
    s.add_argument("config", metavar="CONFIG")
    s.add_argument("--grafana-url", default=None, help="Grafana base URL instead of the workspace's (e.g. through a proxy)")


def cmd_grafana(ns: argparse.Namespace) -> int:
    from fminfra.observability.grafana_sync import run

    (path, cfg), *_ = load_configs([ns.config])
    if not cfg.observability.grafana.enabled:
        raise ConfigError(
            [f"{path}: observability.grafana.enabled: is false, so there is no Grafana workspace to sync; set it to true and deploy"]
        )
    return run(cfg, grafana_url=ns.grafana_url)


EXTRA_COMMANDS["grafana"] = ("Amazon Managed Grafana: `grafana sync CONFIG`", _grafana_arguments, cmd_grafana)


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
    p = sub.add_parser("preflight", help="read-only AWS checks of capacity, quotas and subnets before a deploy")
    p.add_argument("configs", nargs="+", metavar="CONFIG")
    p.add_argument("--profile", help="AWS profile (default: normal credential resolution)")
    p.set_defaults(handler=cmd_preflight)
    p = sub.add_parser("capacity-blocks", help="find and buy EC2 Capacity Blocks for ML")
    _add_capacity_blocks_arguments(p)
    p.set_defaults(handler=cmd_capacity_blocks)
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
