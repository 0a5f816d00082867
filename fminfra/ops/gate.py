"""Policy gates over a synthesized assembly, and the summary table `make synth` prints.

cdk-nag runs inside synth (a finding makes synth fail); this module adds fminfra's own rules and
cfn-lint over every template, then prints per environment the stacks with their resource counts,
GPUs, EFA interfaces attached/maximum and, when present, FSx throughput.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from fminfra.config import EnvironmentConfig
from fminfra.core.assembly import POLICY_PACKS_FILE, StackTemplate, read_assembly
from fminfra.core.table import format_table
from fminfra.ops.common import UsageError
from fminfra.ops.plan import group_plans, slurm_head_rows
from fminfra.policy.rules import Finding, check_templates

CFN_LINT_CONFIG = ".cfnlintrc.yaml"


def own_rule_findings(stacks: list[StackTemplate]) -> list[Finding]:
    return check_templates({s.stack_name: s.template for s in stacks})


# cfn-lint's own entry point (cfnlint.runner:main), run by this Python: the cfn-lint that fminfra
# depends on, never another one a PATH happens to find first.
_CFN_LINT = "import sys\nfrom cfnlint.runner import main\nsys.exit(main())"
CFN_LINT_MISSING = "cfn-lint is not installed beside this Python: pip install 'cfn-lint>=1.58.0,<2' (a dependency of fminfra)"


def cfn_lint(paths: list[Path], config_file: Path | None = None, region: str | None = None) -> tuple[int, str]:
    """Run cfn-lint (the one this Python imports) over templates: (exit code, output).

    With a region, the templates are checked against that region's resource types and values
    (an instance type HyperPod does not offer there, say); else the config file's regions apply.
    UsageError (one line, exit 2) when cfn-lint is not installed."""
    if importlib.util.find_spec("cfnlint") is None:
        raise UsageError(f"gate: {CFN_LINT_MISSING}")
    cmd = [sys.executable, "-c", _CFN_LINT]
    if config_file is not None and config_file.exists():
        cmd += ["--config-file", str(config_file)]
    if region is not None:
        cmd += ["--regions", region]
    result = subprocess.run([*cmd, "--", *map(str, paths)], capture_output=True, text=True, check=False)
    return result.returncode, (result.stdout + result.stderr).strip()


NAG_NOT_RUN = (
    f"not run (no {POLICY_PACKS_FILE}: synthesize with `make synth`; in an app of your own, build it with "
    "fminfra.build_app and call fminfra.app.synth.record_policy_packs(app) after app.synth())"
)
COUNT_LEGEND = "count: instances; for inference node groups min-desired-max"


def environment_summary(cfg: EnvironmentConfig | None, stacks: list[StackTemplate]) -> str:
    """The per-environment table `make synth` prints: stacks, groups (Slurm nodes too), file system, outputs."""
    lines = [f"== {stacks[0].environment if stacks else '?'}"]
    lines.append(format_table(["stack", "resources"], [[s.stack_name, str(s.resource_count)] for s in stacks]))
    if cfg is not None:
        rows = [[r.name, r.kind, r.instance_type, r.count_text, str(r.gpus), r.efa_text] for r in group_plans(cfg)]
        rows += [[name, kind, instance_type, str(count), "0", "-"] for name, kind, instance_type, count in slurm_head_rows(cfg)]
        if rows:
            lines.append(format_table(["group", "kind", "instance type", "count", "GPUs", "EFA attached/max"], rows))
            lines.append(COUNT_LEGEND)
        lines.append(f"GPUs: {sum(int(r[4]) for r in rows)}")
    for stack in stacks:
        for res in (stack.template.get("Resources") or {}).values():
            if res.get("Type") != "AWS::FSx::FileSystem":
                continue
            props = res.get("Properties") or {}
            lustre = props.get("LustreConfiguration") or {}
            capacity, per_tib = props.get("StorageCapacity"), lustre.get("PerUnitStorageThroughput")
            if isinstance(capacity, int) and isinstance(per_tib, int):
                lines.append(f"FSx for Lustre: {capacity} GiB at {per_tib} MB/s/TiB = {capacity / 1024 * per_tib / 1000:.1f} GB/s")
            else:
                lines.append(f"FSx for Lustre: {capacity} GiB ({lustre.get('DeploymentType')})")
    next_lines: list[str] = []
    for stack in stacks:
        outputs = [o for o in (stack.template.get("Outputs") or {}).values() if isinstance(o, dict) and o.get("Description")]
        known = [o for o in outputs if isinstance(o.get("Value"), str)]
        later = [o["Description"] for o in outputs if not isinstance(o.get("Value"), str)]
        next_lines.extend(f"  {o['Description']}: {o['Value']}" for o in known)
        if later:
            next_lines.append(
                f"  {stack.stack_name}: {', '.join(later)} (after deploy: aws cloudformation describe-stacks "
                f"--stack-name {stack.stack_name} --query 'Stacks[0].Outputs')"
            )
    if next_lines:
        lines.append("next:")
        lines.extend(next_lines)
    return "\n".join(lines)


def run_gate(outdir: Path, configs: dict[str, EnvironmentConfig], *, cfn_lint_config: Path | None = None) -> int:
    """Own rules and cfn-lint over every template; print the tables. 0 clean, 1 on findings."""
    assembly = read_assembly(outdir, include_app_stacks=True)  # AssemblyError: one line, exit 2
    if not assembly:
        print(f"{outdir}: (assembly): no stacks found; run `make synth` first", file=sys.stderr)
        return 2
    missing = sorted(set(configs) - set(assembly))
    if missing:
        print(f"{outdir}: (assembly): no stacks of environment {', '.join(missing)}; synthesize it first", file=sys.stderr)
        return 2
    own_findings = 0
    all_paths: list[Path] = []
    by_region: dict[str | None, list[Path]] = {}
    for env, stacks in assembly.items():
        print(environment_summary(configs.get(env), stacks))
        print()
        all_paths.extend(s.path for s in stacks)
        region = configs[env].region if env in configs else None
        by_region.setdefault(region, []).extend(s.path for s in stacks)
        for finding in own_rule_findings(stacks):
            print(f"FAIL own rule: {finding}")
            own_findings += 1
    code = 0
    for region, paths in by_region.items():  # each environment against its own region's data
        region_code, output = cfn_lint(paths, cfn_lint_config, region)
        if region_code != 0:
            print(f"FAIL cfn-lint{f' ({region})' if region else ''} (exit {region_code}):\n{output}")
            code = code or region_code
    report = outdir / "validation-report.json"
    packs_file = outdir / POLICY_PACKS_FILE
    nag_ran = packs_file.exists()
    nag_violations = 0
    if report.exists():
        for plugin in json.loads(report.read_text()).get("pluginReports", []):
            nag_violations += len(plugin.get("violations") or [])
    if nag_violations:
        print(f"FAIL cdk-nag: {nag_violations} unsuppressed findings (see {report})")
    nag_text = "FAIL" if nag_violations else ("ok" if nag_ran else NAG_NOT_RUN)
    print(
        f"policy gates: cdk-nag {nag_text}, "
        f"cfn-lint {'FAIL' if code else 'ok'} ({len(all_paths)} templates), "
        f"own rules {'FAIL' if own_findings else 'ok'}"
    )
    return 1 if (own_findings or code or nag_violations or not nag_ran) else 0


def command(ns: argparse.Namespace) -> int:
    from fminfra.config import config_files, resolve_config_path
    from fminfra.ops.common import load_configs

    paths = [resolve_config_path(c) for c in ns.configs] if ns.configs else config_files(Path(ns.config_dir))
    configs = {cfg.name: cfg for _, cfg in load_configs([str(p) for p in paths])}
    return run_gate(Path(ns.outdir), configs, cfn_lint_config=Path(ns.cfn_lint_config))
