"""checkov (pinned, its own virtual environment) over every synthesized template: zero unexplained
failures, and every skip in `fminfra.ops.checkov.SKIPS` still covers something.

`make setup` installs checkov into .venv-checkov; `make test` sets FMINFRA_REQUIRE_CHECKOV=1, so
there a missing checkov fails instead of skipping."""

from __future__ import annotations

import json
import os

import pytest

from fminfra.ops.checkov import CHECKOV_VERSION, SKIPS, default_executable, run_checkov
from tests.conftest import ROOT, Synth

CHECKOV = default_executable(ROOT)

# A test of the test: a template with a log group that has no KMS key (what the flow-log group was
# before) fails checkov's CKV_AWS_158, and no skip covers it.
BROKEN = {"Resources": {"PlainLogGroup": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 90}}}}


@pytest.fixture(scope="module")
def checkov_result(synth: Synth, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if not CHECKOV.exists():
        if os.environ.get("FMINFRA_REQUIRE_CHECKOV") == "1":
            pytest.fail(f"{CHECKOV}: not installed; run `make setup`")
        pytest.skip(f"{CHECKOV} not installed (make setup installs it; make test requires it)")
    broken = tmp_path_factory.mktemp("broken") / "broken.template.json"
    broken.write_text(json.dumps(BROKEN))
    templates = [s.path for s in synth.all_templates()]
    return len(templates), run_checkov([*templates, broken], CHECKOV)


def test_checkov_is_the_pinned_version(checkov_result) -> None:  # type: ignore[no-untyped-def]
    _, result = checkov_result
    assert result.version == CHECKOV_VERSION
    pins = (ROOT / "requirements-checkov.txt").read_text()
    assert f"checkov=={CHECKOV_VERSION}" in pins


def test_every_template_passes_checkov_but_the_broken_one(checkov_result) -> None:  # type: ignore[no-untyped-def]
    count, result = checkov_result
    assert count >= 30
    assert [(f.logical_id, f.check_id) for f in result.unexplained] == [("PlainLogGroup", "CKV_AWS_158")]
    assert result.passed > 1000


def test_every_skip_is_used_narrow_and_explained(checkov_result) -> None:  # type: ignore[no-untyped-def]
    _, result = checkov_result
    assert result.stale_skips() == []
    for skip in SKIPS:
        assert skip.logical_id_prefix and skip.resource_type.startswith("AWS::") and len(skip.reason) >= 60, skip
    # a skip covers only its own resources: the access-log bucket's CKV_AWS_18 does not cover the data bucket
    covered = {(f.logical_id.rstrip("0123456789ABCDEF"), f.check_id) for _, f in result.skipped}
    assert ("DataBucketBucket", "CKV_AWS_18") not in covered
