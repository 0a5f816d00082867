"""The serving gate's load: streamed completions against one OpenAI-compatible endpoint, and what
they measured, as vLLM's own benchmark defines it (docs/facts/vllm.md#vllm-bench-metric-definitions).

One request (`stream_completion`): POST /v1/completions with `stream: true` and
`stream_options: {include_usage: true}` (docs/facts/vllm.md#vllm-openai-streaming), a prompt of
`input_tokens` token ids and `max_tokens` = `output_tokens` with `ignore_eos`, so that every request
has the lengths asked for whatever the model would say. Timing, as vLLM's `async_request_openai_completions`:
the time to first token is from the send to the first chunk that has choices; each later chunk with
choices adds one inter-token gap; the request's latency ends at the last such chunk. Output tokens:
the final usage chunk's `completion_tokens`.

A request fails on: an HTTP status other than 200, a connection error or timeout, an error chunk
(`{"error": ...}`: vLLM's streamed error), a stream that ends without `data: [DONE]` (dropped), no
chunk with choices, or no usage chunk. vLLM's benchmark counts only the first, second and fifth as
failures (it skips error chunks and keeps a stream that breaks after its first chunk); the gate is
stricter, since each of these is an answer a client would not get.

A load point (`run_load`): `requests` requests, `concurrency` of them in flight at once (threads).
Reported as vLLM's benchmark reports them: TTFT, TPOT (per request: (latency - TTFT) / (output
tokens - 1), for requests of more than one token) and ITL (every gap of every request, pooled), each
at p50 and p99 (linear interpolation, numpy's default); output tokens per second = the successful
requests' output tokens / the wall time of the point; error rate = failed / sent.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

DONE = "[DONE]"
# Prompts of token ids (an exact length without a tokenizer), each request's its own from its first token on:
# vLLM caches prefixes by default, and a repeated prompt would be served from the cache, hiding the prefill
# (vLLM's own benchmark draws a different sequence per request: docs/facts/vllm.md#vllm-prefix-caching-default).
# Ids below 30000 fit every vocabulary of 32000 tokens or more; 7919 is prime to PROMPT_ID_SPAN, so the
# first tokens of PROMPT_ID_SPAN consecutive requests all differ.
PROMPT_ID_BASE = 100
PROMPT_ID_SPAN = 29900
ERRORS_KEPT = 5


@dataclass
class RequestResult:
    ok: bool = False
    error: str = ""
    ttft_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    latency_s: float = 0.0
    output_tokens: int = 0


@dataclass(frozen=True)
class Measurement:
    """One load point's figures (milliseconds, tokens per second, a fraction)."""

    sent: int
    failed: int
    duration_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    output_tokens: int
    output_tokens_per_s: float
    errors: tuple[str, ...] = ()

    @property
    def error_rate(self) -> float:
        return self.failed / self.sent if self.sent else 1.0

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "errors": list(self.errors), "error_rate": self.error_rate}


def percentile(values: list[float], p: float) -> float | None:
    """numpy.percentile's default (linear interpolation between the closest ranks); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def prompt_ids(index: int, input_tokens: int) -> list[int]:
    """Request `index`'s prompt: `input_tokens` ids, its first one different from every other request's."""
    return [PROMPT_ID_BASE + (index * 7919 + j * 104729) % PROMPT_ID_SPAN for j in range(input_tokens)]


def completion_request(model: str, input_tokens: int, output_tokens: int, index: int = 0) -> dict[str, object]:
    """The body: a prompt of token ids and ignore_eos (docs/facts/vllm.md#vllm-completions-token-prompt)."""
    return {
        "model": model,
        "prompt": prompt_ids(index, input_tokens),
        "max_tokens": output_tokens,
        "ignore_eos": True,  # vLLM's sampling parameter: generate max_tokens whatever the model says
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def stream_completion(
    base_url: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    timeout_s: float,
    clock: Callable[[], float] = time.perf_counter,
    index: int = 0,
) -> RequestResult:
    """One streamed completion (the load's request `index`), timed; never raises (a failure is the result's error)."""
    body = json.dumps(completion_request(model, input_tokens, output_tokens, index)).encode()
    request = urllib.request.Request(  # noqa: S310 # http(s) only: parse_endpoints and service_url make the URL
        base_url.rstrip("/") + "/v1/completions", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    out = RequestResult()
    start = last = clock()
    done = usage = streamed = False
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 # the endpoint's URL: http(s) only, checked by the caller
            for raw in response:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue  # blank separators and SSE comments (": ping")
                data = line.removeprefix("data:").strip()
                if data == DONE:
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    error = chunk["error"]
                    out.error = (
                        f"error chunk: {error.get('type', '?')}: {error.get('message', '')}" if isinstance(error, dict) else str(error)
                    )
                    return out
                if chunk.get("choices"):
                    now = clock()
                    if streamed:
                        out.itl_s.append(now - last)
                    else:
                        out.ttft_s, streamed = now - start, True
                    last = now
                elif chunk.get("usage"):
                    out.output_tokens = int(chunk["usage"].get("completion_tokens") or 0)
                    usage = True
    except urllib.error.HTTPError as exc:
        out.error = f"HTTP {exc.code}: {exc.read()[:200].decode('utf-8', errors='replace')}"
        return out
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short, not JSON
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    out.latency_s = last - start
    if not streamed:
        out.error = "no chunk with choices (no token streamed)"
    elif not done:
        out.error = "the stream ended without data: [DONE] (dropped)"
    elif not usage:
        out.error = "no usage chunk (stream_options.include_usage was asked)"
    out.ok = not out.error
    return out


def measure(results: list[RequestResult], duration_s: float) -> Measurement:
    good = [r for r in results if r.ok]
    ttfts = [r.ttft_s * 1000 for r in good]
    tpots = [(r.latency_s - r.ttft_s) / (r.output_tokens - 1) * 1000 for r in good if r.output_tokens > 1]
    itls = [gap * 1000 for r in good for gap in r.itl_s]
    tokens = sum(r.output_tokens for r in good)
    errors = [r.error for r in results if not r.ok]
    return Measurement(
        sent=len(results),
        failed=len(errors),
        duration_s=duration_s,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        tpot_p50_ms=percentile(tpots, 50),
        tpot_p99_ms=percentile(tpots, 99),
        itl_p50_ms=percentile(itls, 50),
        itl_p99_ms=percentile(itls, 99),
        output_tokens=tokens,
        output_tokens_per_s=tokens / duration_s if duration_s > 0 else 0.0,
        errors=tuple(sorted(set(errors)))[:ERRORS_KEPT],
    )


def run_load(
    base_url: str, model: str, *, input_tokens: int, output_tokens: int, concurrency: int, requests: int, timeout_s: float
) -> Measurement:
    """`requests` streamed completions, `concurrency` at a time."""
    lock = threading.Lock()
    left = [requests]

    def worker() -> list[RequestResult]:
        mine: list[RequestResult] = []
        while True:
            with lock:
                if left[0] == 0:
                    return mine
                left[0] -= 1
                index = requests - left[0] - 1
            mine.append(stream_completion(base_url, model, input_tokens, output_tokens, timeout_s, index=index))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(worker) for _ in range(concurrency)]
        results = [r for f in futures for r in f.result()]
    return measure(results, time.perf_counter() - start)
