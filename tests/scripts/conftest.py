"""Fixtures the node-script tests share."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.fakes.drain_fakes import stop


@pytest.fixture
def jobs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Job processes a test starts (each a real process); killed and reaped after the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for job in started:
        stop(job.pid)
        job.wait()
