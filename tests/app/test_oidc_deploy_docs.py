"""docs/promotion.md deploys the account-level GitHub OIDC stacks one account at a time.

Each stack is in its own account (`fminfra-github-oidc-ACCOUNT`), and a deploy with one account's
administrator credentials fails for another account's stack; a selector that matches several
stacks therefore fails for all but one. The CDK CLI matches a selector as a glob against the stack
ids (`*` any characters), which `fnmatch` models for the selectors used here.
"""

from __future__ import annotations

import fnmatch
import re
import shlex

import aws_cdk as cdk

from fminfra.config import load_config
from fminfra.stacks.github_oidc import github_oidc_stacks
from tests.conftest import ROOT

DOC = ROOT / "docs" / "promotion.md"


def oidc_deploy_commands(markdown: str) -> list[str]:
    """Every `cdk deploy` line of the bash blocks that deploys a GitHub OIDC stack."""
    blocks = re.findall(r"```bash\n(.*?)```", markdown, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if "cdk deploy" in line and "github_repository" in line]


def selector(command: str) -> str:
    words = shlex.split(command)
    words = words[words.index("deploy") + 1 :]
    stacks, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("-c", "--context"):
            skip = True
        elif not word.startswith("-"):
            stacks.append(word)
    (only,) = stacks
    return only


def selection_problems(markdown: str, accounts: list[str], stack_names: list[str]) -> list[str]:
    """For each documented command and each account it is run for: the stacks it selects must be
    exactly that account's one."""
    problems = []
    commands = oidc_deploy_commands(markdown)
    if not commands:
        return ["no cdk deploy of the GitHub OIDC stacks found"]
    for command in commands:
        pattern = selector(command)
        for account in accounts:
            chosen = sorted(n for n in stack_names if fnmatch.fnmatchcase(n, pattern.replace("ACCOUNT", account)))
            if chosen != [f"fminfra-github-oidc-{account}"]:
                problems.append(f"{command!r} run for {account} selects {chosen}")
    return problems


def _stacks() -> tuple[list[str], list[str]]:
    configs = [load_config(ROOT / "config" / f"{name}.yaml") for name in ("dev", "staging", "prod")]
    stacks = github_oidc_stacks(cdk.App(), configs, repository="example-org@1/fminfra@2")
    return sorted({c.account for c in configs}), [s.stack_name for s in stacks]


def test_each_documented_deploy_selects_one_accounts_stack() -> None:
    accounts, names = _stacks()
    assert len(accounts) > 1 and len(names) == len(accounts)
    text = DOC.read_text(encoding="utf-8")
    assert len(oidc_deploy_commands(text)) == 3
    assert selection_problems(text, accounts, names) == []


def test_the_selection_check_can_fail() -> None:
    """A test of the test: the command as docs/promotion.md had it selects every account's stack."""
    accounts, names = _stacks()
    old = "```bash\nnpx cdk deploy -c github_repository=OWNER/REPO 'fminfra-github-oidc-*'\n```\n"
    problems = selection_problems(old, accounts, names)
    assert len(problems) == len(accounts) and all("selects ['fminfra-github-oidc-" in p and "', '" in p for p in problems), problems
    assert selection_problems("no commands", accounts, names) == ["no cdk deploy of the GitHub OIDC stacks found"]
    assert (
        selector("npx cdk deploy -c github_repository=a/b -c pipeline_account=4 fminfra-github-oidc-ACCOUNT")
        == "fminfra-github-oidc-ACCOUNT"
    )
