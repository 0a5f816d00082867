"""The repository's source files, with or without `.git`.

`git ls-files -co --exclude-standard` where the checkout is a git repository; otherwise (a
CodePipeline source artifact is a zip without `.git`: docs/facts/pipeline.md#codepipeline-source-zip-no-git)
a walk of the tree that leaves out what the top-level `.gitignore` ignores, so that the two give
the same list (tests/ci/test_codebuild_source.py checks that they do).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from pathlib import Path


def gitignore_patterns(root: Path) -> list[str]:
    """The top-level .gitignore's patterns; ValueError for a form the walk does not implement."""
    path = root / ".gitignore"
    patterns = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!") or "**" in line or "/" in line.rstrip("/"):
            raise ValueError(f"{path}: {line!r}: negations, ** and paths are not implemented by tests/source_files.py")
        patterns.append(line)
    return patterns


def _ignored(name: str, is_dir: bool, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.endswith("/"):
            if is_dir and fnmatch.fnmatchcase(name, pattern[:-1]):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def walked_files(root: Path) -> list[str]:
    """Every file under root, relative and POSIX, leaving out `.git` and what .gitignore ignores."""
    patterns = gitignore_patterns(root)
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git" and not _ignored(d, True, patterns))
        rel = Path(folder).relative_to(root)
        for name in sorted(files):
            if name != ".git" and not _ignored(name, False, patterns):  # a worktree's .git is a file
                found.append((rel / name).as_posix())
    return sorted(found)


def git_files(root: Path) -> list[str] | None:
    """`git ls-files -co --exclude-standard` (existing files only), or None where root is no git checkout."""
    if not (root / ".git").exists():
        return None
    result = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return None
    return sorted(name for name in result.stdout.splitlines() if (root / name).is_file())


def source_files(root: Path) -> list[str]:
    """The source files of the checkout at root: git's list where there is one, else the walk."""
    listed = git_files(root)
    return walked_files(root) if listed is None else listed
