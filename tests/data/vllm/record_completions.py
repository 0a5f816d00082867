"""Write completions-<vLLM version>.json: what vLLM's OpenAI-compatible server answers on /v1/completions
(streamed), /v1/models and /health, made by the server's own response classes and framing code.

Not a capture from a running server (there was no GPU): vLLM's `OpenAIServingCompletion.completion_stream_generator`
(`vllm/entrypoints/openai/completion/serving.py`) needs an engine. This builds the objects that
generator builds, with the same classes and the same serialization, in the same order, and frames them
as it does:
- per token, `CompletionStreamResponse(id, object="text_completion", created, model, choices=[CompletionResponseStreamChoice(index,
  text, logprobs, finish_reason, stop_reason, prompt_token_ids, token_ids)])`, `model_dump_json(exclude_unset=True)`,
  `f"data: {json}\\n\\n"`;
- with `stream_options.include_usage`, the usage chunk `CompletionStreamResponse(id, created, model, choices=[],
  usage=UsageInfo(...), system_fingerprint, metrics)`, `model_dump_json(exclude_unset=False, exclude_none=True)`;
- then `"data: [DONE]\\n\\n"`;
- a generation error in the middle: `create_streaming_error_response` of `GenerateBaseServing`
  (`vllm/entrypoints/generate/base/serving.py`, as `_convert_generation_error_to_streaming_response` calls it)
  in a `data:` frame, then `[DONE]`;
- an error answered before streaming (the route's `JSONResponse(content=ErrorResponse.model_dump(),
  status_code=error.code)`): `create_error_response` (`vllm/entrypoints/serve/exception_handling/error_response.py`);
- /v1/models: `ModelList(data=[ModelCard(id, max_model_len, root, permission=[ModelPermission()])]).model_dump()`
  as `OpenAIServingModels.show_available_models` builds it; /health: an empty 200.
The token texts are invented (no model ran); the ids and timestamps are of the recording machine.

Run it with a Python that has the pinned vLLM wheel installed (SOURCES.md, "completions-0.31.0.json"):
    python tests/data/vllm/record_completions.py tests/data/vllm
"""

from __future__ import annotations

import json
import sys
import time
from http import HTTPStatus
from pathlib import Path
from types import SimpleNamespace

import vllm
from vllm.entrypoints.generate.base.serving import GenerateBaseServing
from vllm.entrypoints.openai.completion.protocol import CompletionResponseStreamChoice, CompletionStreamResponse
from vllm.entrypoints.serve.engine.protocol import ModelCard, ModelList, ModelPermission, UsageInfo
from vllm.entrypoints.serve.exception_handling.error_response import create_error_response

MODEL = "llama-3.1-8b-instruct"  # examples/serving.yaml, chat-8b's served_name
ROOT = "/models/llama-3-1-8b-instruct"
MAX_MODEL_LEN = 8192
PROMPT_TOKENS = 16
TEXTS = [" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy"]  # 8 output tokens


def token_frames(request_id: str, created: int, texts: list[str]) -> list[str]:
    frames = []
    for n, text in enumerate(texts, 1):
        last = n == len(texts)
        chunk = CompletionStreamResponse(
            id=request_id,
            object="text_completion",
            created=created,
            model=MODEL,
            choices=[
                CompletionResponseStreamChoice(
                    index=0,
                    text=text,
                    logprobs=None,
                    finish_reason="length" if last else None,
                    stop_reason=None,
                    prompt_token_ids=None,
                    token_ids=None,
                )
            ],
        )
        frames.append(f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n")
    return frames


def usage_frame(request_id: str, created: int, completion_tokens: int) -> str:
    usage = UsageInfo(prompt_tokens=PROMPT_TOKENS, completion_tokens=completion_tokens, total_tokens=PROMPT_TOKENS + completion_tokens)
    chunk = CompletionStreamResponse(
        id=request_id, created=created, model=MODEL, choices=[], usage=usage, system_fingerprint=None, metrics=None
    )
    return f"data: {chunk.model_dump_json(exclude_unset=False, exclude_none=True)}\n\n"


def streaming_error(message: str, err_type: str, status: HTTPStatus) -> str:
    serving = SimpleNamespace(create_error_response=create_error_response)
    return GenerateBaseServing.create_streaming_error_response(serving, message, err_type=err_type, status_code=status)  # type: ignore[arg-type]


def main(folder: Path) -> None:
    created = int(time.time())
    done = "data: [DONE]\n\n"
    stream = "".join([*token_frames("cmpl-recorded-0", created, TEXTS), usage_frame("cmpl-recorded-0", created, len(TEXTS)), done])
    error = streaming_error("Internal server error", "InternalServerError", HTTPStatus.INTERNAL_SERVER_ERROR)
    broken = "".join([*token_frames("cmpl-recorded-1", created, TEXTS[:3]), f"data: {error}\n\n", done])
    models = ModelList(data=[ModelCard(id=MODEL, max_model_len=MAX_MODEL_LEN, root=ROOT, permission=[ModelPermission()])])
    not_found = create_error_response("The model `other` does not exist.", "NotFoundError", HTTPStatus.NOT_FOUND, "model")
    internal = create_error_response("Internal server error", "InternalServerError", HTTPStatus.INTERNAL_SERVER_ERROR)
    recording = {
        "vllm_version": vllm.__version__,
        "model": MODEL,
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": len(TEXTS),
        "completions_stream": {"status": 200, "content_type": "text/event-stream; charset=utf-8", "body": stream},
        "completions_stream_error": {"status": 200, "content_type": "text/event-stream; charset=utf-8", "body": broken},
        "completions_not_found": {"status": not_found.error.code, "body": json.dumps(not_found.model_dump())},
        "completions_internal_error": {"status": internal.error.code, "body": json.dumps(internal.model_dump())},
        "models": {"status": 200, "body": json.dumps(models.model_dump())},
        "health": {"status": 200, "body": ""},
    }
    out = folder / f"completions-{vllm.__version__}.json"
    out.write_text(json.dumps(recording, indent=2) + "\n", encoding="utf-8")
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
