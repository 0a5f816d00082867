"""The one table renderer of the CLI's output (plan, gate, preflight, cost, capacity-blocks)."""

from __future__ import annotations


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain text table, columns left-aligned."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)).rstrip() for row in [headers, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
