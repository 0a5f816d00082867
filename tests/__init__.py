"""The test suite. Importing this package (before any aws_cdk import) puts .venv/bin first on PATH,
so jsii, in this process and in every subprocess a test starts, runs on the project's pinned Node,
as under `make test`, also when pytest is started directly."""

import os
from pathlib import Path

_VENV_BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin"
if (_VENV_BIN / "node").exists() and not os.environ.get("PATH", "").startswith(str(_VENV_BIN)):
    os.environ["PATH"] = f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
