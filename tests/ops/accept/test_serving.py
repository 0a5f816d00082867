"""`fminfra accept ENV --serving`: the serving gate against the fake vLLM server of tests/fakes/vllm_fake.py
(responses recorded with vLLM 0.31.0's own classes: tests/data/vllm/SOURCES.md): a healthy server passes,
a slow one fails TTFT/TPOT/ITL, a failing one (HTTP 500, a dropped stream, an error chunk) counts errors
and fails; missing thresholds are named; the endpoint from --endpoint or the Service's load balancer
through the fake kubectl; the cost per million output tokens; and tests of the fake itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from fminfra.cli.main import main as cli_main
from fminfra.config import load_config
from fminfra.config.pipeline import ServingThresholds
from fminfra.ops.accept import eks as accept_eks
from fminfra.ops.accept import serving
from fminfra.ops.accept.streaming import measure, percentile, stream_completion
from fminfra.ops.pricing import PriceBook
from tests.conftest import ROOT
from tests.fakes.kubectl_fake import put_on_path
from tests.fakes.vllm_fake import Behaviour, frames, recording, serve

EXAMPLE = ROOT / "examples" / "serving.yaml"
MODEL = "llama-3.1-8b-instruct"  # chat-8b's served_name, and the recording's model
POINT = {"model": "chat-8b", "input_tokens": 16, "output_tokens": 8, "concurrency": 2, "requests": 4}
FAST = {"ttft_p99_ms": 500, "tpot_p99_ms": 50, "itl_p99_ms": 50, "min_output_tokens_per_s": 10}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """examples/serving.yaml with chat-8b only, and a pipeline.yaml whose accept.serving FAST thresholds it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    data = yaml.safe_load(EXAMPLE.read_text())
    data["serving"]["models"] = data["serving"]["models"][:1]
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "serve.yaml").write_text(yaml.safe_dump(data))
    _pipeline(tmp_path, [{**POINT, **FAST}])
    return tmp_path


def _pipeline(folder: Path, entries: list[dict[str, Any]], **accept: Any) -> Path:
    path = folder / "pipeline.yaml"
    source = {
        "connection_arn": "arn:aws:codeconnections:us-west-2:777777777777:connection/0f0f0f0f-0f0f-0f0f-0f0f-0f0f0f0f0f0f",
        "repository": "a/b",
    }
    runner = {} if accept.get("serving_gate") is False else {"runs_on": ["self-hosted"]}  # load_pipeline asks for one with the gate on
    environment = {"config": "config/serve.yaml", "accept": {"serving": entries, **runner, **accept}}
    path.write_text(yaml.safe_dump({"account": "777777777777", "region": "us-west-2", "source": source, "environments": [environment]}))
    return path


def _accept(folder: Path, url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    report = folder / "serving.json"
    code = cli_main(["accept", "config/serve.yaml", "--serving", "--endpoint", f"chat-8b={url}", "--report", str(report), *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


def _rows(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["name"].removeprefix("serving chat-8b 16/8 x2 "): (c["status"], c["detail"]) for c in report["checks"]}


def test_a_healthy_server_passes(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve() as fake:
        code, report = _accept(env, fake.url)
    assert code == 0, capsys.readouterr().out
    rows = _rows(report)
    assert {name: status for name, (status, _) in rows.items()} == {
        "errors": "PASS",
        "ttft_p99": "PASS",
        "tpot_p99": "PASS",
        "itl_p99": "PASS",
        "output_tokens_per_s": "PASS",
        "cost per 1M output tokens": "PASS",
    }
    measured = report["points"][0]["measured"]
    assert (measured["sent"], measured["failed"], measured["output_tokens"]) == (4, 0, 32)
    assert fake.problems == []  # streamed, usage asked, 16 prompt token ids, max_tokens 8
    assert all(r["ignore_eos"] is True and r["model"] == MODEL for r in fake.requests)
    out = capsys.readouterr().out
    assert "PASS serving chat-8b 16/8 x2 ttft_p99" in out and f"report: {env / 'serving.json'}" in out


def test_a_slow_server_fails_ttft_tpot_and_itl(env: Path) -> None:
    with serve(Behaviour(first_token_delay_s=0.6, chunk_delay_s=0.06)) as fake:
        code, report = _accept(env, fake.url)
    assert code == 1
    rows = _rows(report)
    assert rows["ttft_p99"][0] == rows["tpot_p99"][0] == rows["itl_p99"][0] == "FAIL"
    assert rows["ttft_p99"][1] == "max 500 (pipeline.yaml accept.serving)"
    assert rows["errors"][0] == "PASS"  # slow is not wrong


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        ("http500", 'HTTP 500: {"error": {"message": "Internal server error", "type": "InternalServerError"'),
        ("drop", "the stream ended without data: [DONE] (dropped)"),
        ("error_chunk", "error chunk: InternalServerError: Internal server error"),
    ],
)
def test_a_failing_server_counts_errors_and_fails(env: Path, failure: str, error: str) -> None:
    with serve(Behaviour(failure=failure, fail_every=2)) as fake:
        code, report = _accept(env, fake.url)
    assert code == 1
    status, detail = _rows(report)["errors"]
    assert status == "FAIL" and detail.startswith("error rate 0.500, max 0: ") and error in detail
    assert report["points"][0]["measured"]["failed"] == 2


def test_an_error_rate_within_the_limit_passes(env: Path) -> None:
    _pipeline(env, [{**POINT, **FAST, "max_error_rate": 0.5}])
    with serve(Behaviour(failure="http500", fail_every=2)) as fake:
        code, report = _accept(env, fake.url)
    assert _rows(report)["errors"][0] == "PASS", report
    assert code == 0


def test_an_unhealthy_server_fails_before_any_completion(env: Path) -> None:
    with serve(Behaviour(unhealthy=True)) as fake:
        code, report = _accept(env, fake.url, "--timeout-minutes", "0.002", "--poll-seconds", "0.02")
    assert code == 1 and fake.requests == []
    assert [(c["name"], c["status"]) for c in report["checks"]] == [("serving chat-8b ready", "FAIL")]
    assert "not ready within 0.002 minutes" in report["checks"][0]["detail"] and "/health: HTTP 503" in report["checks"][0]["detail"]


class _Clock:
    """A clock the waits advance by their own sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_gate_waits_for_a_model_that_is_still_starting() -> None:
    """Serving read 3, B1: right after a deploy the nodes, the image and the weights are still coming; the gate
    asks again every poll until its timeout, and a model that turns ready in time is measured."""
    clock = _Clock()
    wait = serving.Wait(seconds=600, poll_seconds=30, sleep=clock.sleep, clock=lambda: clock.now)
    answers = iter(["/health answered 503"] * 5 + [None])
    assert wait.until(lambda: next(answers)) is None and clock.now == 150
    hosts = iter(["", "", "nlb.example"])
    assert serving.service_url(lambda *a: next(hosts), "serving", "chat-8b", wait) == "http://nlb.example"
    clock.now = 0.0
    assert wait.until(lambda: "/health answered 503") == "/health answered 503" and clock.now == 600  # gave up at its timeout


def test_the_wait_check_fails_without_waiting() -> None:
    """The test of the test: with no time to wait (the gate before read 3), the same starting model fails."""
    answers = iter(["/health answered 503"] * 5 + [None])
    assert serving.Wait(seconds=0).until(lambda: next(answers)) == "/health answered 503"
    with pytest.raises(serving.UsageError, match="has no load balancer host yet"):
        serving.service_url(lambda *a: "", "serving", "chat-8b")


def test_missing_thresholds_are_named(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pipeline(env, [{**POINT, "mlperf": "llama3_1-8b"}])
    assert cli_main(["accept", "config/serve.yaml", "--serving", "--dry-run", "--endpoint", "chat-8b=http://x"]) == 0
    err = capsys.readouterr().err
    assert (
        "missing: serving chat-8b 16/8 x2: min_output_tokens_per_s: no threshold (no public figure for it here);"
        " set accept.serving[].min_output_tokens_per_s for serve in pipeline.yaml"
    ) in err
    assert "ttft_p99_ms" not in err  # MLPerf's llama3_1-8b gives it (2000 ms) and tpot (100 ms)
    with serve() as fake:
        code, report = _accept(env, fake.url)
    rows = _rows(report)
    assert code == 1
    assert rows["output_tokens_per_s"] == (
        "FAIL",
        "no threshold: set accept.serving[].min_output_tokens_per_s in pipeline.yaml (no public figure)",
    )
    assert rows["ttft_p99"] == (
        "PASS",
        "max 2000 (MLPerf Inference llama3_1-8b Server p99 (docs/facts/serving.md#mlperf-llm-server-latency))",
    )
    assert rows["tpot_p99"][1].startswith("max 100 (MLPerf")


def test_a_model_without_an_entry_is_named_and_fails(env: Path) -> None:
    _pipeline(env, [])
    with serve() as fake:
        code, report = _accept(env, fake.url)
    assert code == 1 and fake.requests[1:] == []
    [check] = report["checks"]
    assert check["name"] == "serving chat-8b thresholds" and check["status"] == "FAIL"
    assert check["detail"].startswith("no thresholds for it on g6e.12xlarge; add an accept.serving entry for serve in pipeline.yaml")


def test_the_gate_off_runs_nothing(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pipeline(env, [], serving_gate=False)
    assert cli_main(["accept", "config/serve.yaml", "--serving", "--if-gated"]) == 0
    assert "the serving gate is off" in capsys.readouterr().out


def test_the_job_summary_gets_the_table(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = env / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    with serve() as fake:
        _accept(env, fake.url)
    text = summary.read_text()
    assert text.startswith("### serving gate: serve\n\n| | check | figure | detail |")
    assert "| PASS | serving chat-8b 16/8 x2 cost per 1M output tokens | $" in text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("chat-8b", "accept: --endpoint: MODEL=http(s)://HOST[:PORT], got 'chat-8b'"),
        ("chat-8b=file:///etc/passwd", "accept: --endpoint: MODEL=http(s)://HOST[:PORT], got 'chat-8b=file:///etc/passwd'"),
        ("chat-9b=http://x", "accept: --endpoint: 'chat-9b' is not a served model (allowed: chat-8b)"),
    ],
)
def test_a_bad_endpoint_is_one_line(env: Path, value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["accept", "config/serve.yaml", "--serving", "--endpoint", value]) == 2
    assert message in capsys.readouterr().err


def test_the_endpoint_comes_from_the_services_load_balancer(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No --endpoint: kubectl (the fake of tests/fakes/kubectl_fake.py) reads the Service's load balancer host."""
    put_on_path(env, monkeypatch)
    cluster = {
        "name": "fminfra-serve-eks",
        "status": "ACTIVE",
        "endpoint": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
        "certificateAuthority": {"data": "Q0E="},
    }
    client = boto3.client("eks", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_response("describe_cluster", {"cluster": cluster}, {"name": "fminfra-serve-eks"})
    stubber.activate()
    monkeypatch.setattr(accept_eks, "eks_client", lambda region: client)
    state = env / "state.json"
    monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
    with serve() as fake:
        # the fake's host and port stand in for the NLB's DNS name (port 80 in a cluster)
        state.write_text(
            json.dumps({"endpoint": cluster["endpoint"], "cluster": cluster["name"], "services": {"serving/chat-8b-api": fake.url[7:]}})
        )
        report = env / "serving.json"
        assert cli_main(["accept", "config/serve.yaml", "--serving", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["points"][0]["endpoint"] == fake.url
    calls = json.loads(state.read_text())["calls"]
    assert calls == [["get", "service", "chat-8b-api", "-n", "serving", "-o", "jsonpath={.status.loadBalancer.ingress[0].hostname}"]]


def test_a_pending_load_balancer_is_one_line(env: Path) -> None:
    with pytest.raises(serving.UsageError, match="service chat-8b-api in serving has no load balancer host yet"):
        serving.service_url(lambda *args: "", "serving", "chat-8b")


def test_cost_per_million_output_tokens() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.serving is not None
    chat_8b, chat_405b = cfg.serving.models
    book = PriceBook("us-west-2")
    price = book.get("ec2:g6e.12xlarge")
    assert price is not None
    usd, how = serving.cost_per_million(cfg, chat_8b, 1000.0, book)
    # one g6e.12xlarge node (tensor parallel 4 of its 4 GPUs), replicas.min 1: $/h / (1000 tok/s x 3600) x 1e6
    assert usd == pytest.approx(price.usd / 3.6)
    assert how == f"1 x g6e.12xlarge at ${price.usd:g}/h On-Demand (us-west-2) / 1000.0 tokens/s"
    p5 = book.get("ec2:p5.48xlarge")
    usd_405b, how_405b = serving.cost_per_million(cfg, chat_405b, 1000.0, book)
    if p5 is not None:  # 2 nodes per replica (tensor 8 x pipeline 2 over 8-GPU nodes)
        assert usd_405b == pytest.approx(2 * p5.usd / 3.6) and how_405b.startswith("2 x p5.48xlarge")
    else:
        assert usd_405b is None and "no public source" in how_405b
    assert serving.cost_per_million(cfg, chat_8b, 0.0, book) == (None, "no output tokens measured")


def test_percentile_is_numpys_linear_default() -> None:
    assert percentile([], 99) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)
    assert percentile([10.0, 0.0], 99) == pytest.approx(9.9)


def test_tpot_and_throughput_follow_vllms_benchmark() -> None:
    from fminfra.ops.accept.streaming import RequestResult

    one = RequestResult(ok=True, ttft_s=0.1, itl_s=[0.01, 0.03], latency_s=0.14, output_tokens=3)
    failed = RequestResult(ok=False, error="HTTP 500: x")
    m = measure([one, failed], duration_s=2.0)
    assert m.tpot_p50_ms == pytest.approx(20.0)  # (0.14 - 0.1) / (3 - 1)
    assert m.itl_p50_ms == pytest.approx(20.0) and m.ttft_p99_ms == pytest.approx(100.0)
    assert (m.output_tokens_per_s, m.error_rate, m.errors) == (1.5, 0.5, ("HTTP 500: x",))


def test_thresholds_resolve_from_the_entry_then_mlperf() -> None:
    entry = ServingThresholds.model_validate({**POINT, "mlperf": "llama3_1-405b", "ttft_p99_ms": 3000})
    limits = serving._limits(entry)
    assert (limits["ttft_p99_ms"].value, limits["ttft_p99_ms"].source) == (3000, "pipeline.yaml accept.serving")
    assert limits["tpot_p99_ms"].value == 175 and limits["tpot_p99_ms"].source.startswith("MLPerf Inference llama3_1-405b")
    assert (limits["itl_p99_ms"].value, limits["min_output_tokens_per_s"].value, limits["max_error_rate"].source) == (
        None,
        None,
        "default 0",
    )


# Tests of the test: the fake is what the recording says, and the client sees each way it breaks.


def test_the_fake_replays_the_recording_frame_by_frame() -> None:
    rec = recording()
    assert rec["vllm_version"] == "0.31.0" and rec["model"] == MODEL
    stream = frames(rec["completions_stream"]["body"])
    assert stream[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(f.removeprefix("data: ")) for f in stream[:-1]]
    assert [c["object"] for c in chunks] == ["text_completion"] * 9
    assert [c["choices"][0]["finish_reason"] for c in chunks[:8]] == [None] * 7 + ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 16, "total_tokens": 24, "completion_tokens": 8}
    broken = frames(rec["completions_stream_error"]["body"])
    assert json.loads(broken[3].removeprefix("data: "))["error"]["code"] == 500 and broken[-1] == "data: [DONE]\n\n"
    with serve() as fake:
        result = stream_completion(fake.url, MODEL, 16, 8, 5)
        assert (result.ok, result.output_tokens, len(result.itl_s)) == (True, 8, 7)
        other = stream_completion(fake.url, "other", 16, 8, 5)
        assert other.error.startswith('HTTP 404: {"error": {"message": "The model `other` does not exist."')
        stream_completion(fake.url, MODEL, 15, 8, 5)
        assert fake.problems == ["lengths 15/8, recorded 16/8"]


@pytest.mark.parametrize(
    ("behaviour", "ok", "error"),
    [
        (Behaviour(), True, ""),
        (Behaviour(failure="drop"), False, "the stream ended without data: [DONE] (dropped)"),
        (Behaviour(failure="error_chunk"), False, "error chunk: InternalServerError: Internal server error"),
        (Behaviour(failure="http500"), False, "HTTP 500: "),
    ],
)
def test_each_fake_failure_is_seen_by_the_client(behaviour: Behaviour, ok: bool, error: str) -> None:
    with serve(behaviour) as fake:
        result = stream_completion(fake.url, MODEL, 16, 8, 5)
    assert result.ok is ok and result.error.startswith(error)


def test_the_slow_fake_is_slow() -> None:
    with serve(Behaviour(first_token_delay_s=0.2, chunk_delay_s=0.03)) as fake:
        result = stream_completion(fake.url, MODEL, 16, 8, 5)
    assert result.ttft_s >= 0.2 and min(result.itl_s) >= 0.025


def test_a_server_that_is_not_there_is_an_error() -> None:
    with serve() as fake:
        url = fake.url
    result = stream_completion(url, MODEL, 16, 8, 2)
    assert not result.ok and result.error.startswith(("ConnectionRefusedError", "URLError"))


def _repeated_prompts(requests: int) -> int:
    """How many of a load's first `requests` prompts repeat an earlier one's first token."""
    from fminfra.ops.accept.streaming import completion_request

    firsts = [completion_request(MODEL, 64, 8, index=i)["prompt"][0] for i in range(requests)]  # type: ignore[index]
    return len(firsts) - len(set(firsts))


def test_every_request_of_a_load_has_its_own_prompt() -> None:
    """Serving read 3, B2: one prompt for every request is served from vLLM's prefix cache after the first wave,
    which hides the prefill the TTFT threshold is about; each request's prompt differs from its first token."""
    from fminfra.ops.accept.streaming import PROMPT_ID_BASE, PROMPT_ID_SPAN, completion_request

    assert _repeated_prompts(PROMPT_ID_SPAN) == 0
    prompt = completion_request(MODEL, 64, 8, index=7)["prompt"]
    assert len(prompt) == 64 and all(PROMPT_ID_BASE <= t < PROMPT_ID_BASE + PROMPT_ID_SPAN for t in prompt)  # type: ignore[union-attr]
    assert completion_request(MODEL, 64, 8, index=3) == completion_request(MODEL, 64, 8, index=3)  # reproducible


def test_the_prompt_check_fails_on_a_repeated_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    from fminfra.ops.accept import streaming

    monkeypatch.setattr(streaming, "prompt_ids", lambda index, n: [1000] * n)  # the gate's prompt before read 3
    assert _repeated_prompts(100) == 99


def test_every_wait_of_a_gate_run_shares_one_deadline() -> None:
    """Serving read 4, C4: the gate's waits for several models add up to at most --timeout-minutes, so the gate ends
    (and names what was not ready) within the accept job's own timeout."""
    clock = _Clock()
    wait = serving.Wait(seconds=600, poll_seconds=30, sleep=clock.sleep, clock=lambda: clock.now)
    answers = iter(["pending"] * 10 + [None])
    assert wait.until(lambda: next(answers)) is None and clock.now == 300
    assert wait.until(lambda: "/health answered 503") == "/health answered 503" and clock.now == 600  # not 900
    makefile = (ROOT / "Makefile").read_text()
    assert "--timeout-minutes $(SERVING_WAIT_MINUTES)" in makefile and "SERVING_WAIT_MINUTES ?= 30" in makefile
