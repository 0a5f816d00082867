"""The acceptance jobs' result parsers on real, published outputs (tests/data/jobs/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fminfra.ops.accept.node.results import (
    GIB,
    DdpResult,
    ResultError,
    TorchrunFailure,
    busbw_at,
    nccl_ofi_provider,
    parse_fio_json,
    parse_nccl_tests,
    parse_torchrun,
    read_fsx_results,
)
from tests.conftest import ROOT
from tests.fakes.slurm_fakes import ddp_result_line

DATA = ROOT / "tests" / "data" / "jobs"


def _read(name: str) -> str:
    return (DATA / name).read_text()


# --- nccl-tests -----------------------------------------------------------------------------------


def test_nccl_two_p5_srun_label_output() -> None:
    """aws-samples/awsome-distributed-training README, 2x p5.48xlarge (docs/facts/instances.md#nccl-allreduce-p5-two-node)."""
    rows = parse_nccl_tests(_read("nccl-all-reduce-2x-p5.txt"))
    assert len(rows) == 32
    assert (rows[0].size_bytes, rows[-1].size_bytes) == (8, 16 * GIB)
    by_size = {r.size_bytes: r for r in rows}
    assert by_size[GIB].busbw_gbps == 436.95
    assert by_size[GIB].in_place_busbw_gbps == 440.96
    assert by_size[2 * GIB].busbw_gbps == 443.72
    assert busbw_at(rows) == 436.95  # the lower of 1 GiB and 2 GiB
    assert all(r.wrong == 0 for r in rows)


def test_nccl_two_p4de_output() -> None:
    rows = parse_nccl_tests(_read("nccl-all-reduce-2x-p4de.txt"))
    assert len(rows) == 29
    assert busbw_at(rows) == 76.79


def test_nccl_mpijob_tag_output_prefix() -> None:
    """mpirun --tag-output lines ([1,0]<stdout>:), rows elided with '...' in the source."""
    rows = parse_nccl_tests(_read("nccl-all-reduce-2x-p5-mpijob.txt"))
    assert [r.size_bytes for r in rows] == [0, 64 << 20, 128 << 20, 256 << 20, 512 << 20, GIB, 2 * GIB]
    assert busbw_at(rows) == 313.29


def test_nccl_ofi_provider_line() -> None:
    """The EC2 guide's NCCL_DEBUG line (docs/facts/jobs.md#nccl-ofi-provider-line); the tables alone name no provider."""
    assert nccl_ofi_provider("0: " + _read("nccl-debug-efa-ec2-guide.txt")) == "efa"
    assert nccl_ofi_provider(_read("nccl-all-reduce-2x-p5.txt")) is None


def test_nccl_without_the_big_sizes_has_no_figure() -> None:
    rows = parse_nccl_tests("\n".join(_read("nccl-all-reduce-2x-p5.txt").splitlines()[:20]))
    assert busbw_at(rows) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "srun: error: node-1: task 0: Exited with exit code 1",
        # a test of the test: a header alone (the table never came) is not a result
        "0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    ],
)
def test_nccl_output_without_rows_is_an_error(text: str) -> None:
    with pytest.raises(ResultError, match=r"nccl-all_reduce.log: no nccl-tests result rows"):
        parse_nccl_tests(text, "nccl-all_reduce.log")


def test_nccl_counts_wrong_results() -> None:
    line = _read("nccl-all-reduce-2x-p5.txt").splitlines()[-1].rsplit("0", 1)[0] + "3"
    assert parse_nccl_tests(line)[0].wrong == 3


# --- torchrun ---------------------------------------------------------------------------------------


def test_torchrun_failure_summary() -> None:
    """torchrun's ChildFailedError summary as published in Vision-CAIR/MiniGPT-4 issue #237."""
    result = parse_torchrun(_read("torchrun-child-failed.txt"))
    assert result == TorchrunFailure(script="train.py", rank=0, host="n136-117-136.byted.org", exitcode=1)


def test_ddp_result_line() -> None:
    text = "0: fminfra-ddp step 200/200 loss 0.1 step_time_ms 12.4\n0: " + ddp_result_line(12.5, 1.0, 0.1)
    assert parse_torchrun(text) == DdpResult(16, 200, 12.5, 14.0, 1.0, 0.1, True)
    assert parse_torchrun(ddp_result_line(12.5, 1.0, 0.9)).loss_fell is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0: fminfra-ddp step 10/200 loss 1.0 step_time_ms 12\n", "neither a 'fminfra-ddp result' line"),
        ('fminfra-ddp result {"world_size": 2}', "malformed fminfra-ddp result line"),
    ],
)
def test_torchrun_output_without_result(text: str, message: str) -> None:
    with pytest.raises(ResultError, match=message):
        parse_torchrun(text)


# --- fio --------------------------------------------------------------------------------------------


def test_fio_read_uses_bytes_over_runtime() -> None:
    """fio 3.1 JSON (louwrentius/fio-plot): io_bytes / runtime agrees with fio's own bw (KiB/s)."""
    text = _read("fio-3.1-randread-32jobs.json")
    result = parse_fio_json(text, "read")
    assert result.bytes_moved == 11319013376
    assert result.seconds == 60.001
    bw_kib = json.loads(text)["jobs"][0]["read"]["bw"]
    assert result.gb_per_s == pytest.approx(bw_kib * 1024 / 1e9, rel=1e-4)


def test_fio_write_and_the_wrong_phase() -> None:
    text = _read("fio-3.1-randwrite-32jobs.json")
    assert parse_fio_json(text, "write").gb_per_s == pytest.approx(1551941632 / 60.005 / 1e9)
    with pytest.raises(ResultError, match="fio moved no read bytes"):
        parse_fio_json(text, "read")


def test_fio_warnings_before_the_json_are_skipped() -> None:
    text = "fio: file hash not empty on exit\n" + _read("fio-3.1-randread-32jobs.json")
    assert parse_fio_json(text, "read").bytes_moved == 11319013376


def test_fio_job_error_is_reported() -> None:
    data = json.loads(_read("fio-3.1-randread-32jobs.json"))
    data["jobs"][0]["error"] = 5
    with pytest.raises(ResultError, match=r"x.json: fio job 'random-read' reported error 5"):
        parse_fio_json(json.dumps(data), "read", "x.json")


def test_fio_not_json() -> None:
    with pytest.raises(ResultError, match="not fio JSON output"):
        parse_fio_json("{ truncated", "read")


def test_fsx_results_add_the_nodes(tmp_path: Path) -> None:
    for node in ("node-1", "node-2"):
        (tmp_path / f"fio-{node}-read.json").write_text(_read("fio-3.1-randread-32jobs.json"))
    result = read_fsx_results(tmp_path, "read")
    assert sorted(result.per_node) == ["node-1", "node-2"]
    assert result.gb_per_s == pytest.approx(2 * 11319013376 / 60.001 / 1e9)
    with pytest.raises(ResultError, match=r"no fio-<node>-write\.json files"):
        read_fsx_results(tmp_path, "write")
