"""One JSON snapshot per stack per shipped environment (asset hashes masked).

Update deliberately with `pytest --snapshot-update` and review the diff like code.
"""

from __future__ import annotations

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import SHIPPED_CONFIGS, Synth, mask_assets

STACKS = ["Network", "Data", "Storage", "Observability", "Compute"]


@pytest.fixture
def json_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(JSONSnapshotExtension)


def _pairs() -> list[tuple[str, str]]:
    from fminfra.config import load_config

    return [(load_config(p).name, stack) for p in SHIPPED_CONFIGS for stack in STACKS]


@pytest.mark.parametrize(("env", "stack"), _pairs())
def test_stack_snapshot(synth: Synth, json_snapshot: SnapshotAssertion, env: str, stack: str) -> None:
    if not any(s.display_name == f"{env}/{stack}" for s in synth.stacks[env]):
        pytest.skip(f"{env} has no {stack} stack")
    assert mask_assets(synth.template(env, stack)) == json_snapshot
