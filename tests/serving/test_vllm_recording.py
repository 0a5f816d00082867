"""The recorded /metrics text of the pinned vLLM server (tests/data/vllm/): the metric names, types
and labels that fminfra's serving rules, alarms and autoscaling read are the ones that version exposes.

The recording was made with the pinned version's own metrics code, not scraped from a server on a
GPU (tests/data/vllm/SOURCES.md). Names: docs/facts/vllm.md#vllm-metric-names; the text format
parsed here: docs/facts/vllm.md#prometheus-text-format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fminfra.core.versions import version

DATA = Path(__file__).resolve().parent.parent / "data" / "vllm"
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
# Sample suffixes that belong to a histogram or summary family x (x_bucket only for a histogram).
FAMILY_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
# Labels the text format adds to a family's samples, not labels of the metric.
FORMAT_LABELS = {"histogram": {"le"}, "summary": {"quantile"}}

ENGINE_LABELS = frozenset({"model_name", "engine"})
# What docs/facts/vllm.md#vllm-metric-names lists, by the name the text exposes (a counter with `_total`).
EXPECTED: dict[str, tuple[str, frozenset[str]]] = {
    "vllm:num_requests_waiting": ("gauge", ENGINE_LABELS),
    "vllm:num_requests_running": ("gauge", ENGINE_LABELS),
    "vllm:kv_cache_usage_perc": ("gauge", ENGINE_LABELS),
    "vllm:time_to_first_token_seconds": ("histogram", ENGINE_LABELS),
    "vllm:inter_token_latency_seconds": ("histogram", ENGINE_LABELS),
    "vllm:e2e_request_latency_seconds": ("histogram", ENGINE_LABELS),
    "vllm:generation_tokens_total": ("counter", ENGINE_LABELS),
    "vllm:prompt_tokens_total": ("counter", ENGINE_LABELS),
    "vllm:request_success_total": ("counter", ENGINE_LABELS | {"finished_reason"}),
}
# Renamed to vllm:kv_cache_usage_perc and removed before the pinned version (the same entry).
REMOVED = ("vllm:gpu_cache_usage_perc",)


@dataclass
class Family:
    """One metric family of an exposition: its TYPE and its samples as (name, labels, value)."""

    type: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def recording() -> Path:
    """The recording of the pinned server version (scripts/node/versions.env SERVING_VLLM_VERSION)."""
    return DATA / f"metrics-{version('SERVING_VLLM_VERSION')}.txt"


def _labels(text: str, where: str) -> tuple[dict[str, str], str]:
    """Parse `name="value",...}` (text after `{`); returns the labels and the rest after `}`."""
    labels: dict[str, str] = {}
    i = 0
    while True:
        while i < len(text) and text[i] in " ,":
            i += 1
        if text.startswith("}", i):
            return labels, text[i + 1 :]
        eq = text.find("=", i)
        if eq < 0 or not text.startswith('"', eq + 1):
            raise ValueError(f'{where}: a label must be name="value", got {text[i:]!r}')
        name, i, value = text[i:eq].strip(), eq + 2, []
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                value.append({"n": "\n"}.get(text[i + 1], text[i + 1]))
                i += 2
            else:
                value.append(text[i])
                i += 1
        if i >= len(text):
            raise ValueError(f"{where}: label {name} has no closing quote")
        labels[name] = "".join(value)
        i += 1


def parse_exposition(text: str, source: str = "metrics") -> dict[str, Family]:
    """Families of a Prometheus text exposition (format 0.0.4, docs/facts/vllm.md#prometheus-text-format),
    by the name in their TYPE line; a sample with no TYPE line of its own family is `untyped`."""
    families: dict[str, Family] = {}
    owner: dict[str, str] = {}  # sample name -> family name
    for number, raw in enumerate(text.splitlines(), 1):
        line, where = raw.strip(), f"{source}: line {number}"
        if not line:
            continue
        if line.startswith("#"):
            tokens = line[1:].split()
            if tokens[:1] == ["TYPE"]:
                if len(tokens) != 3 or tokens[2] not in TYPES:
                    raise ValueError(f"{where}: TYPE needs a name and one of {', '.join(TYPES)}, got {raw!r}")
                name, kind = tokens[1], tokens[2]
                if name in families:
                    raise ValueError(f"{where}: a second TYPE line for {name}")
                families[name] = Family(kind)
                owner[name] = name
                for suffix in FAMILY_SUFFIXES.get(kind, ()):
                    owner[name + suffix] = name
            continue
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace].strip()
            labels, rest = _labels(line[brace + 1 :], where)
        else:
            name, _, rest = line.partition(" ")
            labels = {}
        fields = rest.split()
        if not name or len(fields) not in (1, 2):
            raise ValueError(f"{where}: a sample is name{{labels}} value [timestamp], got {raw!r}")
        family = owner.get(name)
        if family is None:
            families[name], owner[name], family = Family("untyped"), name, name
        families[family].samples.append((name, labels, float(fields[0])))
    return families


def metric_index(families: dict[str, Family]) -> dict[str, tuple[str, frozenset[str]]]:
    """{family name: (type, label names of its samples, less the format's own le/quantile)}."""
    out = {}
    for name, family in families.items():
        names = {label for _, labels, _ in family.samples for label in labels}
        out[name] = (family.type, frozenset(names - FORMAT_LABELS.get(family.type, set())))
    return out


def recorded_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """The pinned server's metrics, by the name it exposes ('vllm:num_requests_waiting',
    'vllm:generation_tokens_total', a histogram by its base name 'vllm:time_to_first_token_seconds'):
    (type, frozenset of label names)."""
    path = recording()
    return metric_index(parse_exposition(path.read_text(encoding="utf-8"), path.name))


def expected_problems(metrics: dict[str, tuple[str, frozenset[str]]], source: str) -> list[str]:
    """What the facts list that the metrics lack (or carry, for the removed names): one message each."""
    problems = []
    for name, (kind, labels) in EXPECTED.items():
        if name not in metrics:
            problems.append(f"{source}: {name}: missing; docs/facts/vllm.md#vllm-metric-names lists a {kind}")
        elif metrics[name] != (kind, labels):
            got_kind, got_labels = metrics[name]
            problems.append(
                f"{source}: {name}: is a {got_kind} with labels {sorted(got_labels)}; expected a {kind} with labels {sorted(labels)}"
            )
    problems += [f"{source}: {name}: present; it was removed before this version" for name in REMOVED if name in metrics]
    return problems


def histogram_problems(families: dict[str, Family], source: str) -> list[str]:
    """Each histogram series has a +Inf bucket equal to its _count (the text format's rule)."""
    problems = []
    for name, family in families.items():
        if family.type != "histogram":
            continue
        series: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
        for sample, labels, value in family.samples:
            key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            if sample == name + "_bucket" and labels.get("le") == "+Inf":
                series.setdefault(key, {})["inf"] = value
            elif sample == name + "_count":
                series.setdefault(key, {})["count"] = value
        for key, seen in series.items():
            if seen.get("inf") != seen.get("count"):
                problems.append(f"{source}: {name}{dict(key)}: +Inf bucket {seen.get('inf')} differs from _count {seen.get('count')}")
    return problems


def test_the_recording_is_of_the_pinned_version() -> None:
    assert recording().is_file(), f"{recording()}: no recording of SERVING_VLLM_VERSION; see tests/data/vllm/SOURCES.md"


def test_the_listed_metrics_are_recorded_with_their_types_and_labels() -> None:
    assert expected_problems(recorded_metrics(), recording().name) == []


def test_the_recording_has_observations() -> None:
    families = parse_exposition(recording().read_text(encoding="utf-8"), recording().name)
    value = {name: sum(v for s, _, v in f.samples if s in (name, name + "_count")) for name, f in families.items()}
    assert value["vllm:num_requests_waiting"] > 0 and value["vllm:num_requests_running"] > 0
    assert value["vllm:time_to_first_token_seconds"] > 0 and value["vllm:generation_tokens_total"] > 0
    assert histogram_problems(families, recording().name) == []


def test_every_vllm_metric_carries_the_engine_labels() -> None:
    metrics = recorded_metrics()
    vllm = {name: labels for name, (_, labels) in metrics.items() if name.startswith("vllm:")}
    assert len(vllm) > 20
    # vllm:cache_config_info's labels are the cache config's fields, engine among them
    assert [name for name, labels in vllm.items() if "engine" not in labels] == []
    assert [name for name, labels in vllm.items() if name != "vllm:cache_config_info" and "model_name" not in labels] == []


# --- tests of the test ---------------------------------------------------------------------------

GOOD = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.3
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="a \\"quoted\\", name"} 1.0 1395066363000
"""


def test_the_parser_reads_types_labels_and_escapes() -> None:
    families = parse_exposition(GOOD)
    assert metric_index(families) == {
        "vllm:num_requests_waiting": ("gauge", ENGINE_LABELS),
        "vllm:time_to_first_token_seconds": ("histogram", ENGINE_LABELS),
        "vllm:request_success_total": ("counter", ENGINE_LABELS | {"finished_reason"}),
    }
    assert families["vllm:request_success_total"].samples[0][1]["model_name"] == 'a "quoted", name'
    assert histogram_problems(families, "good") == []


def test_a_renamed_metric_fails_the_check() -> None:
    text = recording().read_text(encoding="utf-8").replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    metrics = metric_index(parse_exposition(text, "renamed.txt"))
    assert expected_problems(metrics, "renamed.txt") == [
        "renamed.txt: vllm:kv_cache_usage_perc: missing; docs/facts/vllm.md#vllm-metric-names lists a gauge",
        "renamed.txt: vllm:gpu_cache_usage_perc: present; it was removed before this version",
    ]


def test_a_changed_type_or_label_fails_the_check() -> None:
    text = recording().read_text(encoding="utf-8")
    text = text.replace("# TYPE vllm:num_requests_running gauge", "# TYPE vllm:num_requests_running counter")
    text = text.replace('vllm:prompt_tokens_total{engine="0",', "vllm:prompt_tokens_total{")
    problems = expected_problems(metric_index(parse_exposition(text, "changed.txt")), "changed.txt")
    assert problems == [
        "changed.txt: vllm:num_requests_running: is a counter with labels ['engine', 'model_name']; "
        "expected a gauge with labels ['engine', 'model_name']",
        "changed.txt: vllm:prompt_tokens_total: is a counter with labels ['model_name']; "
        "expected a counter with labels ['engine', 'model_name']",
    ]


def test_a_sample_without_its_type_line_is_untyped() -> None:
    # A counter exposed without `_total` (OpenMetrics names the family so) is not the recorded name.
    text = GOOD.replace("# TYPE vllm:request_success_total counter\n", "")
    assert metric_index(parse_exposition(text))["vllm:request_success_total"][0] == "untyped"


def test_a_broken_histogram_fails_the_check() -> None:
    text = GOOD.replace('le="+Inf",model_name="m"} 2.0', 'le="+Inf",model_name="m"} 5.0')
    assert histogram_problems(parse_exposition(text), "broken.txt") == [
        "broken.txt: vllm:time_to_first_token_seconds{'engine': '0', 'model_name': 'm'}: +Inf bucket 5.0 differs from _count 2.0"
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("# TYPE vllm:x gauges", "line 1: TYPE needs a name and one of counter"),
        ('vllm:x{engine="0} 1', "line 1: label engine has no closing quote"),
        ("vllm:x{engine=0} 1", 'line 1: a label must be name="value"'),
        ("vllm:x 1 2 3", r"line 1: a sample is name\{labels\} value \[timestamp\]"),
    ],
)
def test_the_parser_names_a_bad_line(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_exposition(line + "\n", "bad.txt")
