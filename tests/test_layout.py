"""The package layout's dependency rules, read from the import statements of every module.

- constructs never import config or commands (constructs take props, not files);
- config imports no CDK (validate and plan run without a JS runtime);
- stacks never import commands; core imports only core and the catalog;
- the package root holds only the entry points, the stage/pipeline wiring and the catalog.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fminfra"
ROOT_MODULES = {"__init__", "__main__", "cli", "synth", "stage", "pipeline", "catalog"}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def violations(folder: str, forbidden: tuple[str, ...], package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted((package / folder).rglob("*.py")):
        for name in sorted(imports_of(path)):
            if name.startswith(forbidden):
                out.append(f"{path.relative_to(package.parent)} imports {name}")
    return out


RULES = [
    ("constructs", ("fminfra.config", "fminfra.commands", "fminfra.stacks", "fminfra.cli")),
    ("config", ("aws_cdk", "constructs", "cdk_nag", "fminfra.constructs", "fminfra.stacks", "fminfra.commands")),
    ("stacks", ("fminfra.commands", "fminfra.cli")),
    ("core", ("aws_cdk", "fminfra.config", "fminfra.constructs", "fminfra.stacks", "fminfra.commands", "fminfra.checks")),
    ("checks", ("fminfra.commands", "fminfra.config")),
]


@pytest.mark.parametrize(("folder", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_dependency_rule(folder: str, forbidden: tuple[str, ...]) -> None:
    assert violations(folder, forbidden) == []


def test_rule_catches_a_forbidden_import(tmp_path: Path) -> None:
    """A test of the test: a construct that imports the config is reported."""
    (tmp_path / "constructs").mkdir()
    (tmp_path / "constructs" / "bad.py").write_text("def f():\n    from fminfra.config import load_config\n")
    assert violations("constructs", RULES[0][1], package=tmp_path) == [
        f"{tmp_path.name}/constructs/bad.py imports fminfra.config",
        f"{tmp_path.name}/constructs/bad.py imports fminfra.config.load_config",
    ]


def test_package_root_holds_only_entry_points_wiring_and_catalog() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == ROOT_MODULES


def test_every_cli_verb_has_its_module() -> None:
    from fminfra.cli import COMMANDS, build_parser

    for module in COMMANDS.values():
        assert (PACKAGE / "commands" / f"{module}.py").is_file()
    build_parser()  # every module has HELP, add_arguments and main


def test_public_api_names_resolve() -> None:
    import fminfra

    for name in fminfra.__all__:
        assert getattr(fminfra, name) is not None, name
