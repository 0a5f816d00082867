"""`fminfra accept ENV --serving`: the serving gate. For each model of the environment's `serving:`
section, streamed completions through its endpoint at the load points of pipeline.yaml
(`accept.serving` of the environment: lengths, concurrency, requests), measured by `streaming`, checked
against that entry's thresholds, with the cost per million output tokens; the table, the JSON report,
and (in a GitHub job) the same table as Markdown in the job summary.

The endpoint of a model: `--endpoint MODEL=URL` where given; else its Service's load balancer
(fminfra's internal NLB on port 80, docs/serving.md), whose host kubectl reads:
`kubectl get service MODEL-api -n NAMESPACE -o jsonpath={.status.loadBalancer.ingress[0].hostname}`.
Before its load a model must answer `GET /health` (200) and list its API name on `GET /v1/models`.

Thresholds (docs/serving.md, "The serving gate"): p99 TTFT and p99 TPOT from the entry, or from the
MLPerf benchmark it names (`mlperf:`, docs/facts/serving.md#mlperf-llm-server-latency); p99 ITL only
where set; the minimum output tokens per second has no public default. A figure that is needed and
not set fails its row, named; so does a model without any entry. The error rate's default is 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fminfra import catalog
from fminfra.config import EnvironmentConfig
from fminfra.config.pipeline import ServingThresholds
from fminfra.ops.accept.checks import end_dry_run
from fminfra.ops.accept.node.checks import Check, report_checks
from fminfra.ops.accept.streaming import Measurement, run_load
from fminfra.ops.common import UsageError
from fminfra.ops.pricing import PriceBook
from fminfra.serving.config import ServedModelConfig
from fminfra.serving.rules import MLPERF_SERVER_P99_MS, replica_shape, service_name

# Where a GitHub job's step summary goes, appended to (docs/facts/pipeline.md#github-step-summary-file).
SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
SERVICE_HOST = "jsonpath={.status.loadBalancer.ingress[0].hostname}"


@dataclass(frozen=True)
class Limit:
    value: float | None
    source: str


@dataclass(frozen=True)
class LoadPoint:
    """One entry of accept.serving, resolved: the model's API name and GPU type, each limit and its source."""

    model: str
    api_name: str
    instance_type: str
    input_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    limits: Mapping[str, Limit]

    @property
    def label(self) -> str:
        return f"{self.model} {self.input_tokens}/{self.output_tokens} x{self.concurrency}"


@dataclass(frozen=True)
class ServingPlan:
    points: list[LoadPoint]
    no_entry: dict[str, str]  # model -> why it has no load point
    no_figure: list[str]  # a load point's needed figure that is not set

    @property
    def missing(self) -> list[str]:
        """What a run fails on whatever the servers do."""
        return [*self.no_entry.values(), *self.no_figure]


def _limits(entry: ServingThresholds) -> dict[str, Limit]:
    here = "pipeline.yaml accept.serving"
    ttft, tpot = MLPERF_SERVER_P99_MS[entry.mlperf] if entry.mlperf else (None, None)
    mlperf = f"MLPerf Inference {entry.mlperf} Server p99 (docs/facts/serving.md#mlperf-llm-server-latency)"

    def pick(value: float | None, default: float | None) -> Limit:
        if value is not None:
            return Limit(value, here)
        return Limit(default, mlperf if default is not None else "none")

    return {
        "ttft_p99_ms": pick(entry.ttft_p99_ms, ttft),
        "tpot_p99_ms": pick(entry.tpot_p99_ms, tpot),
        "itl_p99_ms": pick(entry.itl_p99_ms, None),
        "min_output_tokens_per_s": pick(entry.min_output_tokens_per_s, None),
        "max_error_rate": Limit(entry.max_error_rate, here if "max_error_rate" in entry.model_fields_set else "default 0"),
    }


REQUIRED = ("ttft_p99_ms", "tpot_p99_ms", "min_output_tokens_per_s")


def instance_type_of(cfg: EnvironmentConfig, model: ServedModelConfig) -> str:
    return next(g.instance_type for g in cfg.compute.inference_node_groups if g.name == model.node_group)


def serving_plan(cfg: EnvironmentConfig, entries: list[ServingThresholds]) -> ServingPlan:
    """The load points of every served model; a model without an entry, or an entry without a needed figure, is missing."""
    assert cfg.serving is not None
    points: list[LoadPoint] = []
    no_entry: dict[str, str] = {}
    no_figure: list[str] = []
    for model in cfg.serving.models:
        itype = instance_type_of(cfg, model)
        mine = [e for e in entries if e.model == model.name and e.instance_type in (None, itype)]
        if not mine:
            no_entry[model.name] = (
                f"serving {model.name}: no thresholds for it on {itype}; add an accept.serving entry for {cfg.name} in pipeline.yaml "
                "({model, input_tokens, output_tokens, concurrency, requests, ttft_p99_ms or mlperf, tpot_p99_ms, min_output_tokens_per_s})"
            )
        for e in mine:
            point = LoadPoint(model.name, model.api_name, itype, e.input_tokens, e.output_tokens, e.concurrency, e.requests, _limits(e))
            points.append(point)
            no_figure.extend(
                f"serving {point.label}: {name}: no threshold (no public figure for it here); set accept.serving[].{name} for {cfg.name} in pipeline.yaml"
                for name in REQUIRED
                if point.limits[name].value is None
            )
    return ServingPlan(points, no_entry, no_figure)


def parse_endpoints(values: list[str], models: list[str]) -> dict[str, str]:
    """--endpoint MODEL=URL, each at most once, MODEL a served model, URL http:// or https://."""
    out: dict[str, str] = {}
    for value in values:
        model, sep, url = value.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise UsageError(f"accept: --endpoint: MODEL=http(s)://HOST[:PORT], got {value!r}")
        if model not in models:
            raise UsageError(f"accept: --endpoint: {model!r} is not a served model (allowed: {', '.join(models)})")
        if model in out:
            raise UsageError(f"accept: --endpoint: {model} given twice")
        out[model] = url.rstrip("/")
    return out


@dataclass(frozen=True)
class Wait:
    """How long the gate waits for its models after a deploy (their load balancers' hosts, then /health and /v1/models),
    all together:
    a new replica starts a GPU node, pulls the image and loads the weights, for up to the startup probe's hour
    (docs/serving.md#the-serving-gate). accept's --timeout-minutes and --poll-seconds."""

    seconds: float = 3600.0
    poll_seconds: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    # one deadline for every wait of a gate run (every model's host and readiness), set by the first
    _deadline: list[float] = field(default_factory=list, repr=False, compare=False)

    def until(self, problem: Callable[[], str | None]) -> str | None:
        """Ask `problem` until it answers None or the gate's time is up; the last problem, or None."""
        if not self._deadline:
            self._deadline.append(self.clock() + self.seconds)
        deadline = self._deadline[0]
        while True:
            found = problem()
            if found is None or self.clock() + self.poll_seconds > deadline:
                return found
            self.sleep(self.poll_seconds)


def service_url(kubectl: Callable[..., str], namespace: str, model: str, wait: Wait | None = None) -> str:
    """http://HOST of the model's Service's load balancer (port 80), once the controller has written it."""
    name = service_name(model)
    host = [""]

    def pending() -> str | None:
        host[0] = kubectl("get", "service", name, "-n", namespace, "-o", SERVICE_HOST).strip()
        return None if host[0] else "pending"

    if (wait or Wait(seconds=0)).until(pending) is not None:
        waited = f" after {wait.seconds / 60:g} minutes" if wait is not None and wait.seconds else " yet"
        raise UsageError(
            f"accept: service {name} in {namespace} has no load balancer host{waited} (status.loadBalancer.ingress): "
            "wait for the AWS Load Balancer Controller, or pass --endpoint MODEL=URL"
        )
    return f"http://{host[0]}"


def ready_problem(base_url: str, api_name: str, timeout_s: float = 30) -> str | None:
    """None when /health answers 200 and /v1/models lists the model; else what was wrong."""
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=timeout_s) as health:  # noqa: S310 # http(s) checked by parse_endpoints / service_url
            if health.status != 200:
                return f"/health answered {health.status}"
        with urllib.request.urlopen(base_url + "/v1/models", timeout=timeout_s) as models:  # noqa: S310
            listed = [m.get("id") for m in json.loads(models.read()).get("data", [])]
    except urllib.error.HTTPError as exc:
        return f"{exc.url}: HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return f"{base_url}: {type(exc).__name__}: {exc}"
    return None if api_name in listed else f"/v1/models lists {listed}, not {api_name}"


def cost_per_million(cfg: EnvironmentConfig, model: ServedModelConfig, tokens_per_s: float, book: PriceBook) -> tuple[float | None, str]:
    """USD per 1e6 output tokens: the nodes of the replicas that served the load (replicas.min, whole
    nodes, On-Demand) x the hourly price / (tokens/s x 3600) x 1e6; None with the reason when unknown."""
    itype = instance_type_of(cfg, model)
    shape = replica_shape(model.tensor_parallel, model.pipeline_parallel, catalog.CATALOG[itype].gpus)
    nodes = shape.nodes * model.replicas.min
    price = book.get(f"ec2:{itype}")
    if price is None:
        return None, book.missing(f"ec2:{itype}")
    if tokens_per_s <= 0:
        return None, "no output tokens measured"
    usd = nodes * price.usd / (tokens_per_s * 3600) * 1e6
    return usd, f"{nodes} x {itype} at ${price.usd:g}/h On-Demand ({cfg.region}) / {tokens_per_s:.1f} tokens/s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def evaluate(point: LoadPoint, m: Measurement) -> list[Check]:
    """The rows of one load point: error rate, TTFT, TPOT, ITL, throughput."""
    name = f"serving {point.label}"
    lim = point.limits
    out: list[Check] = []
    rate, max_rate = m.error_rate, lim["max_error_rate"].value or 0.0
    errors = "; ".join(m.errors)
    status = "FAIL" if rate > max_rate else "PASS"
    out.append(
        Check(
            f"{name} errors", status, f"{m.failed}/{m.sent}", f"error rate {rate:.3f}, max {max_rate:g}" + (f": {errors}" if errors else "")
        )
    )
    for key, figure, above_fails in (
        ("ttft_p99_ms", m.ttft_p99_ms, True),
        ("tpot_p99_ms", m.tpot_p99_ms, True),
        ("itl_p99_ms", m.itl_p99_ms, True),
        ("min_output_tokens_per_s", m.output_tokens_per_s, False),
    ):
        limit = lim[key]
        shown = f"{figure:.1f} tok/s" if key.startswith("min_") and figure is not None else _ms(figure)
        label = f"{name} {key.removeprefix('min_').removesuffix('_ms')}"
        if limit.value is None and key == "itl_p99_ms":
            out.append(Check(label, "PASS", shown, "reported, no threshold"))
        elif limit.value is None:
            out.append(Check(label, "FAIL", shown, f"no threshold: set accept.serving[].{key} in pipeline.yaml (no public figure)"))
        elif figure is None or (figure == 0 and not above_fails):
            out.append(Check(label, "FAIL", shown, "no successful request to measure"))
        else:
            bad = figure > limit.value if above_fails else figure < limit.value
            word = "max" if above_fails else "min"
            out.append(Check(label, "FAIL" if bad else "PASS", shown, f"{word} {limit.value:g} ({limit.source})"))
    return out


def markdown(checks: list[Check], about: Mapping[str, Any]) -> str:
    rows = "\n".join(f"| {c.status} | {c.name} | {c.figure} | {c.detail.replace('|', '/')} |" for c in checks)
    return f"### serving gate: {about['environment']}\n\n| | check | figure | detail |\n|---|---|---|---|\n{rows}\n"


def _shown_limit(key: str, limit: Limit) -> str:
    if limit.value is not None:
        return f"{limit.value:g} ({limit.source})"
    return "not set: reported only" if key not in REQUIRED else "MISSING: no threshold"


def print_plan(cfg: EnvironmentConfig, plan: ServingPlan, endpoints: Mapping[str, str]) -> None:
    assert cfg.serving is not None
    print(f"# fminfra accept {cfg.name} --serving (dry run): streamed /v1/completions to each model, namespace {cfg.serving.namespace}")
    for model in cfg.serving.models:
        where = (
            endpoints.get(model.name)
            or f"the load balancer of service {service_name(model.name)} (kubectl -n {cfg.serving.namespace} get service)"
        )
        print(f"# {model.name} ({model.api_name}, {instance_type_of(cfg, model)}): {where}")
    for p in plan.points:
        limits = ", ".join(f"{k} {_shown_limit(k, v)}" for k, v in p.limits.items())
        print(
            f"# {p.label}: {p.requests} requests of {p.input_tokens} prompt tokens, {p.output_tokens} output tokens, {p.concurrency} at a time: {limits}"
        )


def run(
    cfg: EnvironmentConfig,
    plan: ServingPlan,
    endpoints: Mapping[str, str],
    report: Path,
    book: PriceBook,
    load: Callable[..., Measurement] = run_load,
    wait: Wait | None = None,
) -> int:
    """Each load point in turn against its model's endpoint; the table, the report, the job summary."""
    assert cfg.serving is not None
    models = {m.name: m for m in cfg.serving.models}
    checks = [Check(f"serving {model} thresholds", "FAIL", "-", why.split(": ", 1)[1]) for model, why in plan.no_entry.items()]
    points: list[dict[str, object]] = []
    ready: dict[str, str | None] = {}
    for point in plan.points:
        url = endpoints[point.model]
        if point.model not in ready:
            waited = wait or Wait(seconds=0)
            url_now, name_now = url, point.api_name

            def not_ready(u: str = url_now, n: str = name_now) -> str | None:
                return ready_problem(u, n)

            ready[point.model] = waited.until(not_ready)
            if ready[point.model] is not None:
                within = f"not ready within {waited.seconds / 60:g} minutes: " if waited.seconds else ""
                checks.append(Check(f"serving {point.model} ready", "FAIL", "-", f"{url}: {within}{ready[point.model]}"))
        if ready[point.model] is not None:
            continue
        print(f"# {point.label}: {point.requests} requests at {url}", flush=True)
        m = load(
            url,
            point.api_name,
            input_tokens=point.input_tokens,
            output_tokens=point.output_tokens,
            concurrency=point.concurrency,
            requests=point.requests,
            timeout_s=float(cfg.serving.stream_idle_timeout_seconds),
        )
        checks.extend(evaluate(point, m))
        usd, how = cost_per_million(cfg, models[point.model], m.output_tokens_per_s, book)
        figure = "-" if usd is None else f"${usd:.2f}"
        checks.append(Check(f"serving {point.label} cost per 1M output tokens", "PASS" if usd is not None else "WARN", figure, how))
        points.append({"point": point.label, "endpoint": url, "measured": m.to_json(), "usd_per_million_output_tokens": usd, "cost": how})
    about: dict[str, Any] = {"environment": cfg.name, "gate": "serving", "points": points}
    code = report_checks(checks, report, about)
    if summary := os.environ.get(SUMMARY_ENV):
        with Path(summary).open("a", encoding="utf-8") as out:
            out.write(markdown(checks, about))
    return code


def endpoints_for(cfg: EnvironmentConfig, given: dict[str, str], connect: Callable[[], Any], wait: Wait | None = None) -> dict[str, str]:
    """--endpoint where given, else each Service's load balancer (one kubectl session for them all)."""
    assert cfg.serving is not None
    left = [m.name for m in cfg.serving.models if m.name not in given]
    if not left:
        return given
    with connect() as (_, kubectl):
        return {**given, **{name: service_url(kubectl, cfg.serving.namespace, name, wait) for name in left}}


def main(
    cfg: EnvironmentConfig,
    entries: list[ServingThresholds],
    endpoint_args: list[str],
    dry_run: bool,
    report: Path | None,
    connect: Callable[[], Any],
    wait: Wait | None = None,
) -> int:
    """accept's --serving branch: after a deploy it waits (`wait`) for each model before it measures."""
    if cfg.serving is None:
        print(f"# fminfra accept {cfg.name} --serving: no serving: section, no served models: nothing to measure", file=sys.stderr)
        return 0
    given = parse_endpoints(endpoint_args, [m.name for m in cfg.serving.models])
    plan = serving_plan(cfg, entries)
    if dry_run:
        print_plan(cfg, plan, given)
        return end_dry_run("accept --serving", cfg.name, plan.missing)
    wait = wait or Wait()
    endpoints = endpoints_for(cfg, given, connect, wait)
    return run(cfg, plan, endpoints, report or Path(f"accept-serving-{cfg.name}.json"), PriceBook(cfg.region), wait=wait)
