#!/usr/bin/env python3
"""Print the policy-gate figures over every synthesized template (`make gate-figures`).

Synthesizes, in-process, every config the tests synthesize (config/, examples/, tests/configs/),
then prints with each tool's version: checkov checks, passed, failed (unexplained) and skipped by
check (the skips and their reasons are `fminfra.ops.checkov.SKIPS`); cfn-lint errors and
warnings; cdk-nag unsuppressed findings and acknowledgments by rule. docs/gates.md records them.
Exit 1 when a gate fails (a checkov failure no skip explains, a cfn-lint finding, a cdk-nag one).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def synthesize(outdir: Path) -> list[Path]:
    import aws_cdk as cdk

    from fminfra.app.synth import build_app
    from fminfra.config import config_files, load_config

    paths = [p for folder in ("config", "examples", "tests/configs") for p in config_files(ROOT / folder)]
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(outdir), context=context)
    build_app([load_config(p) for p in paths], app=app)
    app.synth()
    return sorted(outdir.rglob("*.template.json"))


def nag_figures(outdir: Path) -> tuple[int, Counter[str]]:
    report = json.loads((outdir / "validation-report.json").read_text())
    open_findings = sum(len(p.get("violations") or []) for p in report["pluginReports"])
    acknowledged: Counter[str] = Counter(
        v["ruleName"].split("[", 1)[0] for p in report["pluginReports"] for v in p.get("suppressedViolations") or []
    )
    return open_findings, acknowledged


def main() -> int:
    from fminfra.commands.gate import CFN_LINT_CONFIG, cfn_lint
    from fminfra.ops.checkov import default_executable, run_checkov

    with tempfile.TemporaryDirectory(prefix="fminfra-gates-") as tmp:
        outdir = Path(tmp)
        templates = synthesize(outdir)
        resources = sum(len(json.loads(p.read_text()).get("Resources") or {}) for p in templates)
        lint_code, lint_output = cfn_lint(templates, ROOT / CFN_LINT_CONFIG)
        lint_lines = [line for line in lint_output.splitlines() if line[:1] in ("E", "W") and line[1:5].isdigit()]
        errors = sum(line.startswith("E") for line in lint_lines)
        warnings = sum(line.startswith("W") for line in lint_lines)
        open_nag, acknowledged = nag_figures(outdir)
        checkov = run_checkov(templates, default_executable(ROOT))
    skipped = Counter(skip.check_id for skip, _ in checkov.skipped)
    print(f"templates: {len(templates)} ({resources} resources), aws-cdk-lib {version('aws-cdk-lib')}")
    print(
        f"checkov {checkov.version}: {checkov.checks} checks, {checkov.passed} passed, "
        f"{len(checkov.unexplained)} failed, {len(checkov.skipped)} skipped "
        f"({', '.join(f'{k} {v}' for k, v in sorted(skipped.items()))})"
    )
    for finding in checkov.unexplained:
        print(f"  FAIL checkov: {finding.file}: {finding.logical_id} ({finding.resource_type}): {finding.check_id} {finding.check_name}")
    print(f"cfn-lint {version('cfn-lint')}: {errors} errors, {warnings} warnings (exit {lint_code})")
    by_rule = ", ".join(f"{rule.removeprefix('AwsSolutions-')} {count}" for rule, count in sorted(acknowledged.items()))
    print(f"cdk-nag {version('cdk-nag')} (AwsSolutions): {open_nag} open, {sum(acknowledged.values())} acknowledged ({by_rule})")
    return 1 if (checkov.unexplained or lint_code or open_nag) else 0


if __name__ == "__main__":
    sys.exit(main())
