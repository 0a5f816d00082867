"""`fminfra accept ENV`: the acceptance jobs on a deployed environment, by orchestrator: `slurm`
(HyperPod Slurm, on the login node) or `eks` (HyperPod EKS, through kubectl); `checks` is what
both share, `manifests` the Kubernetes objects, `results` the parsers, `remote` the CI path;
`--serving`: the serving gate (`serving`, its load `streaming`) on the served models' endpoints."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from fminfra.config import EnvironmentConfig
from fminfra.config.pipeline import ACCEPTED_ORCHESTRATORS, DEFAULT_PIPELINE_FILE, load_pipeline, serving_gate_enabled
from fminfra.ops.accept import checks, eks, serving, slurm
from fminfra.ops.common import EXIT_BAD_INPUT, EXIT_OK, UsageError, load_configs


def command(ns: argparse.Namespace) -> int:
    [(config_file, cfg)] = load_configs([ns.config])
    if ns.timeout_minutes <= 0 or ns.poll_seconds <= 0:
        raise UsageError("accept: --timeout-minutes and --poll-seconds must be greater than 0")
    if getattr(ns, "serving", False):
        return serving_command(ns, cfg)
    orchestrator = cfg.compute.orchestrator
    if orchestrator not in (*ACCEPTED_ORCHESTRATORS, "none"):  # none: inference-only EKS, nothing to accept
        print(
            f"{ns.config}: compute.orchestrator: accept runs on slurm and eks (HyperPod) environments; {orchestrator} is not supported yet (docs/first-job.md)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    run_id = ns.run_id or f"{cfg.name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    if not run_id.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"accept: --run-id: letters, digits, '-' and '_' only, got {run_id!r}")
    if orchestrator != "slurm":  # HyperPod EKS, or inference-only EKS (orchestrator none)
        if orchestrator == "none":
            return eks.inference_only(cfg)
        overrides = checks._overrides(ns.pipeline, cfg.name)
        return eks.main(cfg, run_id, ns.dry_run, overrides, ns.timeout_minutes * 60, ns.poll_seconds, ns.report)
    slurm.check_shared_folder(cfg, config_file)
    plan = slurm.slurm_plan(cfg, run_id, checks._overrides(ns.pipeline, cfg.name), checks.read_instance_thresholds())
    if ns.dry_run:
        slurm.print_plan(plan)
        return checks.end_dry_run("accept", cfg.name, plan.missing)
    return slurm.run_on_login_node(plan, ns.timeout_minutes * 60, ns.poll_seconds, ns.report)


def serving_command(ns: argparse.Namespace, cfg: EnvironmentConfig) -> int:
    """--serving: the serving gate (`serving`), with pipeline.yaml's accept.serving of the environment;
    with --if-gated, exit 0 without a request where pipeline.yaml turns the serving gate off."""
    if ns.if_gated:
        path = ns.pipeline or DEFAULT_PIPELINE_FILE
        loaded, configs = load_pipeline(path) if path.exists() else (None, [])
        entry = next((e for e, c in zip(loaded.environments, configs, strict=True) if c.name == cfg.name), None) if loaded else None
        if entry is None or not serving_gate_enabled(entry, cfg):
            print(
                f"accept {cfg.name} --serving: the serving gate is off (pipeline.yaml accept.serving_gate, or no serving: section): nothing to run"
            )
            return EXIT_OK
    overrides = checks._overrides(ns.pipeline, cfg.name)
    entries = overrides.serving if overrides is not None else []
    wait = serving.Wait(seconds=ns.timeout_minutes * 60, poll_seconds=ns.poll_seconds)
    return serving.main(cfg, entries, ns.endpoint or [], ns.dry_run, ns.report, lambda: eks.connect(cfg), wait)
