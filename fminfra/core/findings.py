"""What a check says: one `Finding(path, level, message)` for the problems and warnings of config
validation, construct validation and preflight (AWS ParallelCluster's validators, which return
results with a failure level, are the model)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

# error: the input is refused; warning: legal but risky, said and let through; info: a check passed
# (preflight's PASS rows).
Level = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One result of a check. `path` is the field it is about, relative to the model that found it
    (`compute.instance_groups[0].name`), or a subject such as a reservation id (preflight); `check`
    names what preflight checked (empty elsewhere)."""

    path: str
    level: Level
    message: str
    check: str = ""

    def under(self, prefix: str) -> Finding:
        """The finding with `prefix` in front of its path (a section's findings in the file's terms)."""
        if not prefix:
            return self
        path = f"{prefix}{self.path}" if self.path.startswith("[") else ".".join(p for p in (prefix, self.path) if p)
        return replace(self, path=path)

    def line(self, file: str) -> str:
        """How validate and the loader print it: `FILE: path: message`, `FILE: path: warning: message`."""
        where = self.path or "(top level)"
        return f"{file}: {where}: warning: {self.message}" if self.level == "warning" else f"{file}: {where}: {self.message}"


def error(path: str, message: str) -> Finding:
    return Finding(path, "error", message)


def warning(path: str, message: str) -> Finding:
    return Finding(path, "warning", message)
