"""A fake vLLM OpenAI-compatible server on loopback (tests/ops/accept/test_serving.py): a threaded
HTTP server that answers with the responses of tests/data/vllm/completions-0.31.0.json, recorded from
vLLM 0.31.0's own response classes and framing code (tests/data/vllm/SOURCES.md).

What it serves:
- `GET /health`: the recorded empty 200 (503 with `unhealthy`);
- `GET /v1/models`: the recorded ModelList;
- `POST /v1/completions` with `stream: true`: the recorded event stream, frame by frame (`data: ...\\n\\n`),
  in HTTP/1.1 chunked transfer encoding as uvicorn sends a StreamingResponse, `first_token_delay_s`
  before the first frame and `chunk_delay_s` before each later one; another model is the recorded 404.
How it fails, on every `fail_every`-th completion (1: all of them):
- `http500`: the recorded 500 ErrorResponse before any frame;
- `error_chunk`: the recorded stream with vLLM's streamed error (`{"error": ...}`) after three tokens, then `[DONE]`;
- `drop`: three token frames, then the connection closes without the last chunk (no `[DONE]`).
Each request's JSON body is kept in `requests`; `problems` names what a real server would have
answered differently (a prompt or max_tokens other than the recording's, no stream or usage asked).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDING = Path(__file__).resolve().parents[1] / "data" / "vllm" / "completions-0.31.0.json"


def recording() -> dict[str, Any]:
    return dict(json.loads(RECORDING.read_text(encoding="utf-8")))


def frames(body: str) -> list[str]:
    """The SSE frames of a recorded stream, each with its blank-line end."""
    return [part + "\n\n" for part in body.split("\n\n") if part]


@dataclass
class Behaviour:
    first_token_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    failure: str | None = None  # http500 | error_chunk | drop
    fail_every: int = 1
    unhealthy: bool = False


@dataclass
class FakeVllm:
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    url: str = ""
    _count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_fails(self) -> bool:
        with self._lock:
            self._count += 1
            return self.behaviour.failure is not None and self._count % self.behaviour.fail_every == 0


def _handler(fake: FakeVllm, rec: dict[str, Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # the base class's name
            pass

        def _json(self, answer: dict[str, Any]) -> None:
            body = answer["body"].encode()
            self.send_response(answer["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # BaseHTTPRequestHandler's name
            if self.path == "/health":
                self._json({"status": 503 if fake.behaviour.unhealthy else 200, "body": ""})
            elif self.path == "/v1/models":
                self._json(rec["models"])
            else:
                self._json({"status": 404, "body": json.dumps({"detail": "Not Found"})})

        def _chunk(self, text: str) -> None:
            data = text.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(body)
            if self.path != "/v1/completions":
                return self._json({"status": 404, "body": json.dumps({"detail": "Not Found"})})
            if body.get("model") != rec["model"]:
                return self._json(rec["completions_not_found"])
            if body.get("stream") is not True or body.get("stream_options", {}).get("include_usage") is not True:
                fake.problems.append(f"not streamed with usage: {body.get('stream')}, {body.get('stream_options')}")
            if len(body.get("prompt", [])) != rec["prompt_tokens"] or body.get("max_tokens") != rec["completion_tokens"]:
                fake.problems.append(
                    f"lengths {len(body.get('prompt', []))}/{body.get('max_tokens')}, recorded {rec['prompt_tokens']}/{rec['completion_tokens']}"
                )
            failure = fake.behaviour.failure if fake.next_fails() else None
            if failure == "http500":
                return self._json(rec["completions_internal_error"])
            answer = rec["completions_stream_error" if failure == "error_chunk" else "completions_stream"]
            self.send_response(answer["status"])
            self.send_header("Content-Type", answer["content_type"])
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n, frame in enumerate(frames(answer["body"])):
                time.sleep(fake.behaviour.first_token_delay_s if n == 0 else fake.behaviour.chunk_delay_s)
                if failure == "drop" and n == 3:
                    self.close_connection = True
                    return None  # no terminating chunk: the client sees the body cut short
                self._chunk(frame)
            self.wfile.write(b"0\r\n\r\n")
            return None

    return Handler


@contextmanager
def serve(behaviour: Behaviour | None = None) -> Iterator[FakeVllm]:
    """The fake on 127.0.0.1 on a free port, `url` its base URL; stopped at the end."""
    fake = FakeVllm(behaviour or Behaviour())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake, recording()))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
