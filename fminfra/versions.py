"""Strict reader of the pinned version manifest `scripts/node/versions.env`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from fminfra.errors import ValidationError
from fminfra.resources import versions_manifest

_LINE = re.compile(r"^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>[A-Za-z0-9._:/+,@-]*)$")


def parse_manifest(text: str, source: str = "versions.env") -> dict[str, str]:
    """KEY=VALUE lines and comments only; anything else (quotes, spaces, `$`) is an error."""
    versions: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise ValidationError(f"{source}: line {number}: expected KEY=VALUE (no quotes, spaces or expansions), got {raw!r}")
        if match["key"] in versions:
            raise ValidationError(f"{source}: line {number}: {match['key']} is set twice")
        versions[match["key"]] = match["value"]
    return versions


@cache
def load_versions(path: Path | None = None) -> dict[str, str]:
    """The manifest as a dict (cached)."""
    manifest = path or versions_manifest()
    try:
        text = manifest.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationError(f"{manifest}: (file): no such file; the version manifest is missing") from None
    return parse_manifest(text, str(manifest))


def version(key: str) -> str:
    """One pinned version; ValidationError naming the manifest when the key is absent or empty."""
    versions = load_versions()
    value = versions.get(key)
    if not value:
        raise ValidationError(f"{versions_manifest()}: {key}: not set; known keys: {', '.join(sorted(versions))}")
    return value
