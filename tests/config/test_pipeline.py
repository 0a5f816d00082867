"""pipeline.yaml's serving gate fields (accept.serving, accept.serving_gate): each bad input is one line
naming the file, the field and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fminfra.config.pipeline import load_pipeline, serving_gate_enabled
from fminfra.core.errors import ConfigError
from tests.conftest import ROOT

SOURCE = {
    "connection_arn": "arn:aws:codeconnections:us-west-2:777777777777:connection/0f0f0f0f-0f0f-0f0f-0f0f-0f0f0f0f0f0f",
    "repository": "a/b",
}
POINT = {"model": "chat-8b", "input_tokens": 128, "output_tokens": 128, "concurrency": 4, "requests": 16, "mlperf": "llama3_1-8b"}


def _write(tmp_path: Path, accept: dict[str, Any], config: Path = ROOT / "examples" / "serving.yaml") -> Path:
    path = tmp_path / "pipeline.yaml"
    environment = {"config": str(config), "accept": accept}
    path.write_text(yaml.safe_dump({"account": "777777777777", "region": "us-west-2", "source": SOURCE, "environments": [environment]}))
    return path


def _problems(path: Path) -> list[str]:
    try:
        load_pipeline(path)
    except ConfigError as exc:
        return exc.problems
    return []


def test_a_good_serving_section_loads_and_turns_the_gate_on(tmp_path: Path) -> None:
    path = _write(tmp_path, {"serving": [POINT, {**POINT, "instance_type": "g6e.12xlarge"}], "runs_on": ["self-hosted"]})
    pipeline, [cfg] = load_pipeline(path)
    [env] = pipeline.environments
    assert serving_gate_enabled(env, cfg) and env.accept.serving[0].max_error_rate == 0.0


@pytest.mark.parametrize(
    ("accept", "message"),
    [
        (
            {"serving": [{**POINT, "model": "chat-9b"}], "runs_on": ["x"]},
            "environments[0].accept.serving[0].model: 'chat-9b' is not served by {config} (allowed: chat-8b, chat-405b)",
        ),
        (
            {"serving": [{**POINT, "instance_type": "p5.48xlarge"}], "runs_on": ["x"]},
            "environments[0].accept.serving[0].instance_type: 'p5.48xlarge', but chat-8b runs on node group chat (g6e.12xlarge);"
            " allowed: g6e.12xlarge or leave it out",
        ),
        (
            {"serving": [{**POINT, "requests": 2}], "runs_on": ["x"]},
            "environments[0].accept.serving[0]: requests (2) must be at least concurrency (4)",
        ),
        (
            {"serving": [{**POINT, "mlperf": "llama3-8b"}], "runs_on": ["x"]},
            "environments[0].accept.serving[0].mlperf: Input should be 'llama3_1-8b', 'llama3_1-8b-interactive', 'llama2-70b',",
        ),
        ({"serving": [{**POINT, "ttft_ms": 5}], "runs_on": ["x"]}, "environments[0].accept.serving[0].ttft_ms: unknown field"),
        (  # chat-405b's context is 32768 tokens in the example (serving read 4, C2: every request would be a 400)
            {
                "serving": [{**POINT, "model": "chat-405b", "mlperf": "llama3_1-405b", "input_tokens": 32000, "output_tokens": 1024}],
                "runs_on": ["x"],
            },
            "environments[0].accept.serving[0].input_tokens: 32000 + output_tokens 1024 exceed chat-405b's max_model_len (32768) in {config};"
            " allowed: at most 32768 together",
        ),
        (
            {"serving": [{**POINT, "max_error_rate": 2}], "runs_on": ["x"]},
            "environments[0].accept.serving[0].max_error_rate: Input should be less",
        ),
        (
            {"serving": [POINT]},
            "environments[0].accept.runs_on: required: the serving gate is on and {config}'s models answer on internal load balancers,"
            " which GitHub-hosted runners cannot reach; give the labels of a runner in its VPC, e.g. [self-hosted, fminfra-serve],"
            " or accept: {{serving_gate: false}}",
        ),
    ],
)
def test_bad_serving_input_is_one_clear_line(tmp_path: Path, accept: dict[str, Any], message: str) -> None:
    path = _write(tmp_path, accept)
    problems = _problems(path)
    assert len(problems) == 1, problems
    expected = f"{path}: " + message.format(config=ROOT / "examples" / "serving.yaml")
    assert problems[0].startswith(expected), (problems[0], expected)


def test_serving_fields_on_an_environment_without_models_are_refused(tmp_path: Path) -> None:
    config = ROOT / "config" / "dev.yaml"
    path = _write(tmp_path, {"serving_gate": True, "serving": [POINT]}, config)
    assert _problems(path) == [
        f"{path}: environments[0].accept.serving_gate: true, but {config} has no serving: section",
        f"{path}: environments[0].accept.serving: thresholds given, but {config} has no serving: section (no served models)",
    ]
    pipeline, [cfg] = load_pipeline(_write(tmp_path, {}, config))
    assert not serving_gate_enabled(pipeline.environments[0], cfg)  # no serving: section, no serving gate


def test_the_serving_gate_off_needs_no_runner(tmp_path: Path) -> None:
    pipeline, [cfg] = load_pipeline(_write(tmp_path, {"serving_gate": False}))
    assert not serving_gate_enabled(pipeline.environments[0], cfg)
    assert _problems(_write(tmp_path, {"serving_gate": False, "runs_on": ["x"]})) == [
        f"{tmp_path / 'pipeline.yaml'}: environments[0].accept.runs_on: set, but the gate is off for {ROOT / 'examples' / 'serving.yaml'}:"
        " remove it or turn the gate on"
    ]
