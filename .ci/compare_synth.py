#!/usr/bin/env python3
"""Synthesize everything fminfra ships and compare it byte for byte with an earlier synth.

For a refactor that must not change what deploys (a module move, a construct extracted): run it
once on the commit before the change, into a folder outside the repository, then after each step:

    .venv/bin/python .ci/compare_synth.py synth /tmp/before          # on the old commit
    .venv/bin/python .ci/compare_synth.py check /tmp/after --against /tmp/before

`synth` runs the project's pinned CDK CLI (as `make synth` does, so the context it adds, path
metadata and version reporting, is in the templates) twice, the fewest app runs that cover it all:
1. every config of config/, examples/ and tests/configs/ in one app (as tests/conftest.py's
   once-per-session synth does), with the account-level GitHub OIDC stacks
   (`-c github_repository`, `-c pipeline_account`: the acceptance roles the pipeline may assume);
2. the promotion pipeline app (`-c pipeline=pipeline.yaml`), with every environment inside it.

`compare` (and `check`, which synthesizes first) compares every file of both folders, templates,
assets, manifest.json, tree.json and the rest, byte for byte, and lists what is missing, extra or
different (for tree.json, which constructs were added, removed or changed); exit 1 when anything
differs. Nothing is ignored: the assembly carries no absolute path
and no timestamp (checked: two synths of one commit are identical), so a difference is a change.

It lives in .ci/, not scripts/: the node scripts' asset is the whole scripts/ folder, so a file
added there changes the asset hash of every ec2 template.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG_FOLDERS = ("config", "examples", "tests/configs")
GITHUB_REPOSITORY = "example-org/fminfra"
PIPELINE_ACCOUNT = "444444444444"  # pipeline.yaml's tooling account
PIPELINE_FILE = "pipeline.yaml"


def config_paths() -> list[str]:
    return [str(p.relative_to(ROOT)) for folder in CONFIG_FOLDERS for p in sorted((ROOT / folder).glob("*.yaml"))]


def cdk_synth(out: Path, context: dict[str, str], stacks: list[str]) -> None:
    env = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    command = ["npx", "--no-install", "cdk", "synth", "--quiet", "--no-notices", "-o", str(out)]
    for key, value in context.items():
        command += ["-c", f"{key}={value}"]
    result = subprocess.run([*command, *stacks], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"synth failed ({' '.join(command)}):\n{result.stdout}{result.stderr}")


def synth(folder: Path) -> None:
    if folder.exists() and any(folder.iterdir()):
        sys.exit(f"{folder}: not empty; give a new folder")
    print(f"synthesizing {len(config_paths())} configs and the OIDC stacks into {folder / 'environments'}", file=sys.stderr)
    cdk_synth(
        folder / "environments",
        {"config": ",".join(config_paths()), "github_repository": GITHUB_REPOSITORY, "pipeline_account": PIPELINE_ACCOUNT},
        ["**"],
    )
    print(f"synthesizing the pipeline app ({PIPELINE_FILE}) into {folder / 'pipeline'}", file=sys.stderr)
    cdk_synth(folder / "pipeline", {"pipeline": PIPELINE_FILE}, ["**"])


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def tree_nodes(path: Path) -> dict[str, dict[str, object]]:
    """The construct tree of a tree.json, flat: construct path -> the node less its children."""
    nodes: dict[str, dict[str, object]] = {}

    def walk(node: dict[str, object]) -> None:
        nodes[str(node.get("path", ""))] = {k: v for k, v in node.items() if k != "children"}
        for child in (node.get("children") or {}).values():  # type: ignore[attr-defined]
            walk(child)

    walk(json.loads(path.read_text(encoding="utf-8"))["tree"])
    return nodes


def explain_tree(new: Path, old: Path) -> list[str]:
    """What differs between two tree.json files: constructs added, removed or changed, by path."""
    a, b = tree_nodes(old), tree_nodes(new)
    lines = [f"  + construct {p} ({b[p].get('constructInfo', {}).get('fqn', '?')})" for p in sorted(set(b) - set(a))]  # type: ignore[union-attr]
    lines += [f"  - construct {p}" for p in sorted(set(a) - set(b))]
    lines += [f"  ~ construct {p}" for p in sorted(set(a) & set(b)) if a[p] != b[p]]
    return lines


def only_empty_constructs_added(new: Path, old: Path) -> bool:
    """tree.json differs only by added constructs that hold nothing (a construct that creates its
    resources in its scope, where they keep their paths and logical ids)."""
    a, b = tree_nodes(old), tree_nodes(new)
    added = set(b) - set(a)
    changed = [p for p in set(a) & set(b) if a[p] != b[p]]
    return bool(added) and not changed and set(a) <= set(b) and all(not any(q.startswith(p + "/") for q in b) for p in added)


def compare(new: Path, old: Path, allow_empty_constructs: bool = False) -> int:
    new_files, old_files = files_under(new), files_under(old)
    missing, extra = sorted(old_files - new_files), sorted(new_files - old_files)
    different = sorted(f for f in new_files & old_files if not filecmp.cmp(new / f, old / f, shallow=False))
    allowed = [f for f in different if allow_empty_constructs and f.endswith("tree.json") and only_empty_constructs_added(new / f, old / f)]
    for label, names in (("missing", missing), ("extra", extra), ("different", different)):
        for name in names:
            print(f"{label}: {name}")
            if label == "different" and name.endswith("tree.json"):
                print("\n".join(explain_tree(new / name, old / name)))
    same = len(new_files & old_files) - len(different)
    templates = sum(1 for f in new_files & old_files if f.endswith(".template.json"))
    if missing or extra or set(different) - set(allowed):
        print(f"{new} differs from {old}: {len(missing)} missing, {len(extra)} extra, {len(different)} different, {same} identical")
        return 1
    if allowed:
        print(
            f"{new} == {old} but for {len(allowed)} tree.json with empty constructs added (--allow-empty-constructs): "
            f"{same} files byte-identical ({templates} templates)"
        )
        return 0
    print(f"{new} == {old}: {same} files byte-identical ({templates} templates)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("synth", help="synthesize everything into FOLDER").add_argument("folder", type=Path)
    cmp = sub.add_parser("compare", help="compare two synthesized folders")
    cmp.add_argument("new", type=Path)
    cmp.add_argument("--against", type=Path, required=True)
    cmp.add_argument("--allow-empty-constructs", action="store_true", help="accept tree.json files that only gain empty constructs")
    check = sub.add_parser("check", help="synthesize into FOLDER, then compare with --against")
    check.add_argument("folder", type=Path)
    check.add_argument("--against", type=Path, required=True)
    check.add_argument("--allow-empty-constructs", action="store_true", help="accept tree.json files that only gain empty constructs")
    args = parser.parse_args(argv)
    if args.verb == "synth":
        synth(args.folder.resolve())
        return 0
    if args.verb == "compare":
        return compare(args.new.resolve(), args.against.resolve(), args.allow_empty_constructs)
    synth(args.folder.resolve())
    return compare(args.folder.resolve(), args.against.resolve(), args.allow_empty_constructs)


if __name__ == "__main__":
    sys.exit(main())
