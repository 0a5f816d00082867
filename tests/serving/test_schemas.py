"""The serving kinds' recorded schemas (tests/data/crds, tests/fakes/k8s_schemas.py): each upstream-derived example
in tests/data/crds/examples validates, and a broken copy of each (unknown field, wrong type, missing required
field) is rejected with a problem that names the path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.k8s_schemas import CRDS, validate

EXAMPLES = CRDS / "examples"
SERVING_KINDS = {
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("v1", "ServiceAccount"),
    ("v1", "Namespace"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
}


def _example(kind: str) -> dict[str, Any]:
    [manifest] = [m for m in _examples().values() if m["kind"] == kind]
    return copy.deepcopy(manifest)


def _examples() -> dict[Path, dict[str, Any]]:
    return {path: yaml.safe_load(path.read_text()) for path in sorted(EXAMPLES.glob("*.yaml"))}


def test_one_example_per_serving_kind() -> None:
    kinds = [(m["apiVersion"], m["kind"]) for m in _examples().values()]
    assert sorted(kinds) == sorted(SERVING_KINDS)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_each_example_validates(path: Path) -> None:
    assert validate(yaml.safe_load(path.read_text())) == []


def _containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    return template["spec"]["containers"]


def _drop(node: dict[str, Any], key: str) -> None:
    del node[key]


@pytest.mark.parametrize(
    ("kind", "breaks", "path", "expect"),
    [
        ("Deployment", lambda m: m["spec"].update(replicas="3"), "spec/replicas", "'3' is not of type"),
        ("Deployment", lambda m: _containers(m["spec"]["template"])[0].update(imag="x"), "spec/template/spec/containers/0", "'imag'"),
        ("Service", lambda m: m["spec"]["ports"][0].update(port="eighty"), "spec/ports/0/port", "'eighty' is not of type"),
        ("Service", lambda m: m["spec"].update(selecter={}), "spec", "'selecter'"),
        ("PodDisruptionBudget", lambda m: m["spec"]["selector"].update(matchLabel={}), "spec/selector", "'matchLabel'"),
        ("ServiceAccount", lambda m: m.update(automountServiceAccountToken="no"), "automountServiceAccountToken", "'no' is not of type"),
        ("Namespace", lambda m: m["metadata"].update(lables={}), "metadata", "'lables'"),
        ("ScaledObject", lambda m: _drop(m["spec"]["triggers"][0], "type"), "spec/triggers/0", "'type' is a required property"),
        ("ScaledObject", lambda m: m["spec"].update(maxReplicaCount="2"), "spec/maxReplicaCount", "'2' is not of type 'integer'"),
        ("ScaledObject", lambda m: m["spec"].update(pollingInteval=30), "spec", "'pollingInteval'"),
        ("ScaledObject", lambda m: m["metadata"].update(lables={}), "metadata", "'lables'"),
        ("TriggerAuthentication", lambda m: _drop(m["spec"]["podIdentity"], "provider"), "spec/podIdentity", "'provider' is a required"),
        (
            "TriggerAuthentication",
            lambda m: m["spec"]["podIdentity"].update(provider="eks"),
            "spec/podIdentity/provider",
            "'eks' is not one of",
        ),
        ("LeaderWorkerSet", lambda m: m["spec"]["leaderWorkerTemplate"].update(size="two"), "spec/leaderWorkerTemplate/size", "'two'"),
        (
            "LeaderWorkerSet",
            lambda m: _containers(m["spec"]["leaderWorkerTemplate"]["workerTemplate"])[0].update(imag="x"),
            "spec/leaderWorkerTemplate/workerTemplate/spec/containers/0",
            "'imag'",
        ),
        ("LeaderWorkerSet", lambda m: _drop(m["spec"], "leaderWorkerTemplate"), "spec", "'leaderWorkerTemplate' is a required"),
        ("LeaderWorkerSet", lambda m: m["metadata"].update(lables={}), "metadata", "'lables'"),
    ],
)
def test_a_broken_example_fails_validation(kind: str, breaks: Any, path: str, expect: str) -> None:
    """The test of the test: a wrong field, type or a missing required field is caught, at its path, for each kind."""
    manifest = _example(kind)
    assert validate(manifest) == []
    breaks(manifest)
    problems = validate(manifest)
    assert any(p.startswith(f"{path}: ") and expect in p for p in problems), problems
