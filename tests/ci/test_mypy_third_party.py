"""`.ci/mypy_third_party.py`: the cache `make test`'s mypy starts from holds every third-party name
fminfra imports and nothing of fminfra itself (each with a broken input)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.ci import ci_script
from tests.conftest import ROOT

mypy_third_party = ci_script("mypy_third_party")


def _package(tmp_path: Path, source: str) -> Path:
    package = tmp_path / "fminfra"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "m.py").write_text(source, encoding="utf-8")
    return package


def test_every_outside_import_is_listed_and_fminfra_is_not(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        "from __future__ import annotations\n"
        "import json, botocore.session\n"
        "from aws_cdk import aws_ec2 as ec2, Stack\n"
        "from fminfra.core import rules\n"
        "import fminfra.catalog\n"
        "from . import sibling\n"
        "def f():\n    from yaml import safe_load\n",
    )
    lines = mypy_third_party.third_party_imports(package)
    bound = [re.sub(r" as _m\d+$", "", line) for line in lines]
    assert bound == [
        "from aws_cdk import Stack",
        "from aws_cdk import aws_ec2",
        "import botocore.session",
        "import json",
        "from yaml import safe_load",
    ]
    # each name its own alias: the generated file is valid Python whose bindings never collide
    aliases = [line.rsplit(" as ", 1)[1] for line in lines]
    assert len(set(aliases)) == len(aliases)
    ast.parse("\n".join(lines))


def test_the_listing_covers_what_fminfra_imports_today() -> None:
    lines = mypy_third_party.third_party_imports(ROOT / "fminfra")
    assert any(line.startswith("from aws_cdk import aws_eks ") for line in lines)
    assert not any(" fminfra" in line for line in lines)


def test_an_import_inside_a_function_is_listed_and_no_import_lists_nothing(tmp_path: Path) -> None:
    package = _package(tmp_path, "def f():\n    import pydantic\n")
    assert [re.sub(r" as _m\d+$", "", line) for line in mypy_third_party.third_party_imports(package)] == ["import pydantic"]
    assert mypy_third_party.third_party_imports(_package(tmp_path / "other", "x = 1\n")) == []


def test_make_test_type_checks_fminfra_with_the_cache() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ntest: setup\n", 1)[1].split("\n\n", 1)[0]
    assert "$(MYPY) fminfra" in recipe
    assert "MYPY := $(VENV)/bin/mypy --cache-dir $(VENV)/mypy/cache" in makefile
    assert re.search(r"^setup: .*\$\(VENV\)/mypy/\.cached", makefile, re.MULTILINE)
