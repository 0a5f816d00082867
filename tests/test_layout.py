"""The package layout (docs/layout.md), read from the import statements of every module.

- every module has a kind: `core` and `catalog`; in a concept package (network, storage, compute,
  hyperpod, eks, ...) `<concept>.rules`, `<concept>.config`, `<concept>.constructs`,
  `<concept>.stack`; then `config`, `app`, `ops`, `cli`;
- a module imports only its own kind or a lower one, in the order
  core, catalog -> rules -> <concept>.config -> config -> constructs -> stack -> app -> ops -> cli
  (imports inside functions count; `if TYPE_CHECKING:` imports, which never run, do not), and
  constructs, though above the config, never import it (they take props);
- no module cycles anywhere;
- a concept package's `__init__.py` is empty (so `validate` never loads aws-cdk-lib: checked by running it);
- a CLI verb (`fminfra/cli/verbs/<verb>.py`) parses, makes one call and sets the exit code: about
  80 lines at most, and it imports no other verb.

Each rule has a test of the test: a synthetic package that breaks it, and is caught.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fminfra"

# Rank of each kind, lowest first. Concept kinds are the second part of `fminfra.<concept>.<kind>`.
TOP_KINDS = {"core": 0, "catalog": 0, "config": 3, "app": 6, "ops": 7, "cli": 8}
CONCEPT_KINDS = {"rules": 1, "config": 2, "constructs": 4, "stack": 5}
# The package root: the public API (`fminfra/__init__.py`, names imported on first use), the
# `python -m fminfra` entry point and the old names of moved modules. They are not in the order.
ROOT_MODULES = {"fminfra", "fminfra.__main__", "fminfra._moved"}
VERB_MAX_LINES = 80
# Above the config in the order, but constructs still never read it: they take props.
CONFIG_KINDS = ("config", "<concept>.config")


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of a module except the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imported_names(path: Path) -> set[str]:
    """Every name a file imports at run time (at any depth); `from X import Y` is X.Y."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # X.Y: the module Y when it is one, else X (module_graph resolves it to X)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name resolves to its longest module prefix)."""
    paths = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = set()
        for imported in imported_names(path):
            parts = imported.split(".")
            while parts and ".".join(parts) not in paths:
                parts.pop()
            target = ".".join(parts)
            if target and target != name and target != package.name:
                edges.add(target)
        graph[name] = edges
    return graph


def kind_of(module: str) -> tuple[str, int] | None:
    """(kind, rank) of a module; None for the package root and for a concept package itself."""
    parts = module.split(".")
    if module in ROOT_MODULES or len(parts) < 2 or parts[1] in ("__main__", "_moved"):
        return None
    top = parts[1]
    if top in TOP_KINDS:
        return top, TOP_KINDS[top]
    if len(parts) == 2:
        return None  # a concept package's __init__ (must be empty)
    if parts[2] in CONCEPT_KINDS:
        return f"<concept>.{parts[2]}", CONCEPT_KINDS[parts[2]]
    return "unknown", -1


def unknown_kinds(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if (kind_of(m) or ("", 0))[0] == "unknown")


def order_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, imports in sorted(graph.items()):
        mine = kind_of(module)
        if mine is None:
            continue
        for target in sorted(imports):
            theirs = kind_of(target)
            if theirs is not None and theirs[1] > mine[1]:
                out.append(f"{module} ({mine[0]}) imports {target} ({theirs[0]})")
            elif theirs is not None and mine[0] == "<concept>.constructs" and theirs[0] in CONFIG_KINDS:
                out.append(f"{module} ({mine[0]}) imports {target} ({theirs[0]}): constructs take props, not config")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def concept_packages(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.iterdir() if p.is_dir() and (p / "__init__.py").is_file() and p.name not in TOP_KINDS)


def non_empty_concept_inits(package: Path = PACKAGE) -> list[str]:
    return [
        str(p.relative_to(package.parent) / "__init__.py") for p in concept_packages(package) if (p / "__init__.py").read_text().strip()
    ]


def verb_problems(package: Path = PACKAGE, max_lines: int = VERB_MAX_LINES) -> list[str]:
    verbs = package / "cli" / "verbs"
    out = []
    for path in sorted(verbs.glob("*.py")):
        if path.name == "__init__.py":
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > max_lines:
            out.append(f"{path.name}: {lines} lines (at most {max_lines}: the logic belongs in ops/)")
        others = {".".join(n.split(".")[:4]) for n in imported_names(path) if n.startswith(f"{package.name}.cli.verbs.")}
        out.extend(f"{path.name} imports the verb {name}" for name in sorted(others) if name.split(".")[3] != path.stem)
    return out


GRAPH = module_graph()


def test_every_module_has_a_kind() -> None:
    assert unknown_kinds(GRAPH) == []


def test_modules_import_only_their_kind_or_lower() -> None:
    assert order_violations(GRAPH) == []


def test_no_module_cycles() -> None:
    assert cycles(GRAPH) == []


def test_concept_packages_have_empty_inits() -> None:
    assert concept_packages(), "no concept packages found"
    assert non_empty_concept_inits() == []


def test_verbs_are_thin_and_independent() -> None:
    assert sorted(p.stem for p in (PACKAGE / "cli" / "verbs").glob("*.py") if p.stem != "__init__"), "no verbs found"
    assert verb_problems() == []


def test_validate_does_not_load_aws_cdk() -> None:
    """`validate` (and the CLI it runs in) never imports aws-cdk-lib: it runs without a JS runtime."""
    code = (
        "import sys\n"
        "from fminfra.cli.main import main\n"
        "rc = main(['validate', 'config/dev.yaml', 'examples/'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'constructs', 'cdk_nag', 'jsii'))\n"
        "print(rc, loaded)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 []", result.stdout + result.stderr


def test_every_cli_verb_has_its_module() -> None:
    from fminfra.cli.main import COMMANDS, build_parser

    for module in COMMANDS.values():
        assert (PACKAGE / "cli" / "verbs" / f"{module}.py").is_file()
    build_parser()  # every module has HELP, add_arguments and main


def test_public_api_names_resolve() -> None:
    import fminfra

    for name in fminfra.__all__:
        assert getattr(fminfra, name) is not None, name


def test_old_module_names_resolve_to_the_moved_modules() -> None:
    """Every module moved in 0.3.0 keeps its old name (with a DeprecationWarning) until 0.4.0."""
    import importlib

    from fminfra._moved import MOVED

    for old, new in sorted(MOVED.items()):
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
            sys.modules.pop(old, None)
            assert importlib.import_module(old) is importlib.import_module(new)
        sys.modules.pop(old, None)


# --- tests of the tests: a synthetic package that breaks each rule ---------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "fminfra"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for directory in [package, *(p for p in package.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    return package


def test_a_lower_kind_importing_a_higher_one_is_caught(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "storage/constructs/lustre.py": "def f():\n    from fminfra.config.loader import load_config\n",
            "storage/rules.py": "from fminfra.storage.stack import StorageStack\n",
            "storage/stack.py": "from fminfra.storage.constructs.lustre import f\nfrom fminfra.core.errors import E\n",
            "config/loader.py": "",
            "core/errors.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fminfra.ops.plan import x\n",
            "ops/plan.py": "",
        },
    )
    assert order_violations(module_graph(package)) == [
        "fminfra.storage.constructs.lustre (<concept>.constructs) imports fminfra.config.loader (config): constructs take props, not config",
        "fminfra.storage.rules (<concept>.rules) imports fminfra.storage.stack (<concept>.stack)",
    ]


def test_a_module_outside_the_kinds_is_caught(tmp_path: Path) -> None:
    package = _package(tmp_path, {"storage/helpers.py": "", "storage/rules.py": ""})
    assert unknown_kinds(module_graph(package)) == ["fminfra.storage.helpers"]


def test_a_cycle_is_caught_across_packages_and_inside_functions(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "ops/accept/slurm.py": "from fminfra.ops.accept import eks\n",
            "ops/accept/eks.py": "def f():\n    from fminfra.ops.accept.slurm import g\n",
            "network/rules.py": "from fminfra.storage.rules import x\n",
            "storage/rules.py": "from fminfra.network import rules\n",
            "eks/rules.py": "from fminfra.network.rules import y\n",
        },
    )
    assert cycles(module_graph(package)) == [
        ["fminfra.network.rules", "fminfra.storage.rules"],
        ["fminfra.ops.accept.eks", "fminfra.ops.accept.slurm"],
    ]


def test_a_concept_init_with_code_is_caught(tmp_path: Path) -> None:
    package = _package(tmp_path, {"eks/rules.py": "", "core/errors.py": ""})
    (package / "eks" / "__init__.py").write_text("from fminfra.eks.constructs import cluster\n")
    (package / "core" / "__init__.py").write_text('"""core may say what it holds."""\n')
    assert non_empty_concept_inits(package) == ["fminfra/eks/__init__.py"]


def test_a_fat_verb_and_a_verb_importing_a_verb_are_caught(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "cli/verbs/plan.py": "x = 1\n" * 81,
            "cli/verbs/cost.py": "from fminfra.cli.verbs.plan import x\nfrom fminfra.cli.verbs import cost\n",
        },
    )
    assert verb_problems(package) == [
        "cost.py imports the verb fminfra.cli.verbs.plan",
        "plan.py: 81 lines (at most 80: the logic belongs in ops/)",
    ]
