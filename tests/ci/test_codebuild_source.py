"""`make test` as the CodePipeline Synth step runs it: in CodeBuild, on a source artifact that is a
zip of the repository without `.git` (docs/facts/pipeline.md#codepipeline-source-zip-no-git,
docs/facts/pipeline.md#cdk-pipelines-code-build-clone-output) and without its file modes (every
file 0644: docs/facts/pipeline.md#codepipeline-source-zip-no-modes), in a fresh shell, with
`make setup`'s folders (.venv, .venv-checkov, node_modules) inside the source folder, and as many
test workers as the build's memory holds (docs/facts/pipeline.md#codebuild-compute-type-memory).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.app.test_wheel import Built
from tests.ci import load_script
from tests.conftest import ROOT, XDIST_GROUPS, missing_group_modules, xdist_group_of
from tests.source_files import git_files, gitignore_patterns, source_files, walked_files

sys.path.insert(0, str(ROOT / ".ci"))
import pytest_workers  # .ci/pytest_workers.py

# --------------------------------------------------------------------------------------------
# no test needs .git


def test_the_walk_lists_what_git_lists() -> None:
    """Without .git the suite lists the source files by walking the tree: the same list as git's."""
    listed = git_files(ROOT)
    if listed is None:
        pytest.skip("no .git here (a CodePipeline source): nothing to compare the walk with")
    assert walked_files(ROOT) == listed


def test_the_walk_refuses_gitignore_forms_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("cdk.out\n!keep.txt\n")
    with pytest.raises(ValueError, match=r"'!keep.txt': negations, \*\* and paths are not implemented"):
        gitignore_patterns(tmp_path)
    (tmp_path / ".gitignore").write_text("cdk.out\n__pycache__/\n*.pyc\n")
    for name in ("cdk.out/a.json", "pkg/__pycache__/m.pyc", "pkg/m.pyc", "pkg/m.py", "pkg/__pycache__.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert walked_files(tmp_path) == [".gitignore", "pkg/__pycache__.txt", "pkg/m.py"]


def symlinks(root: Path, names: list[str]) -> list[str]:
    return [name for name in names if (root / name).is_symlink()]


def test_the_source_holds_no_symlinks(tmp_path: Path) -> None:
    """CodePipeline's download removes symlinks (docs/facts/pipeline.md#cdk-pipelines-code-build-clone-output):
    a symlink in the repository would be missing in every CodeBuild step."""
    assert symlinks(ROOT, source_files(ROOT)) == []
    (tmp_path / "real.txt").write_text("x")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    assert symlinks(tmp_path, ["real.txt", "link.txt"]) == ["link.txt"]  # the test of the test


# A git command line in a test: an argv list or a shell string that starts with git.
_GIT_CALL = re.compile(r"""\[\s*["']git["']\s*,|\b(?:run|check_output|check_call|call|Popen)\(\s*f?["']git\s""")
# The helpers that call git only where .git exists (and fall back to the walk).
_GIT_AWARE = {"tests/source_files.py", "tests/ci/test_codebuild_source.py"}


def git_calls(files: dict[str, str]) -> list[str]:
    """`path:line: text` of every git invocation outside the .git-aware helpers."""
    return [
        f"{name}:{lineno}: {line.strip()}"
        for name, text in sorted(files.items())
        if name not in _GIT_AWARE
        for lineno, line in enumerate(text.splitlines(), 1)
        if _GIT_CALL.search(line)
    ]


def test_no_test_calls_git() -> None:
    """CodeBuild's source has no .git, so a test that runs git fails there."""
    files = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests").rglob("*.py"))}
    files |= {name: (ROOT / name).read_text(encoding="utf-8") for name in ("Makefile", "scripts/deploy_local.py")}
    assert git_calls(files) == []


def test_the_git_call_check_can_fail() -> None:
    """A test of the test: the line tests/app/test_facts.py had, and a shell form."""
    broken = {
        "tests/test_x.py": 'names = subprocess.run(["git", "ls-files", "-co"], cwd=ROOT, check=True).stdout\n',
        "tests/test_y.py": 'subprocess.run("git rev-parse HEAD", shell=True)\n',
        # a fake git that a test puts on PATH is no call
        "tests/fakes.py": 'SCRIPTS = {"git": "#!/bin/sh\\n"}\n',
    }
    assert [c.split(":")[0] for c in git_calls(broken)] == ["tests/test_x.py", "tests/test_y.py"]


# --------------------------------------------------------------------------------------------
# as many workers as the memory holds


def _fake_root(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


GIB = 1024**3


def test_workers_fit_codebuilds_large_memory(tmp_path: Path) -> None:
    """BUILD_GENERAL1_LARGE: 8 vCPUs and up to 16 GiB, in a container whose /proc/meminfo shows the host."""
    root = _fake_root(
        tmp_path,
        {
            "proc/meminfo": "MemTotal: 195000000 kB\nMemAvailable: 180000000 kB\n",
            "sys/fs/cgroup/memory.max": str(16 * GIB),
            "sys/fs/cgroup/memory.current": str(1 * GIB),
            "sys/fs/cgroup/cpu.max": "max 100000",
        },
    )
    n_cores, mib = pytest_workers.cores(root, cpus=8), pytest_workers.available_mib(root)
    assert (n_cores, mib) == (8, 15 * 1024)
    count = pytest_workers.workers(n_cores, mib, pytest_workers.DEFAULT_WORKER_MIB)
    assert 1 <= count < 8 and count * pytest_workers.DEFAULT_WORKER_MIB <= 15 * 1024


@pytest.mark.parametrize(
    ("files", "cpus", "expected"),
    [
        # cgroup v1 limit, a CPU quota of 2 cores
        (
            {
                "proc/meminfo": "MemAvailable: 64000000 kB\n",
                "sys/fs/cgroup/memory/memory.limit_in_bytes": str(8 * GIB),
                "sys/fs/cgroup/memory/memory.usage_in_bytes": "0",
                "sys/fs/cgroup/cpu.max": "200000 100000",
            },
            16,
            2,
        ),
        # no cgroup limit (v1's "unlimited" is a huge number): the machine's memory
        ({"proc/meminfo": "MemAvailable: 20000000 kB\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"}, 2, 2),
        # less than one worker's memory: still one worker
        ({"proc/meminfo": "MemAvailable: 1000000 kB\n"}, 4, 1),
    ],
)
def test_worker_count_from_cores_and_memory(tmp_path: Path, files: dict[str, str], cpus: int, expected: int) -> None:
    root = _fake_root(tmp_path, files)
    assert pytest_workers.workers(pytest_workers.cores(root, cpus=cpus), pytest_workers.available_mib(root), 3584) == expected


def test_every_xdist_group_names_a_test_module(tmp_path: Path) -> None:
    """A module renamed or moved out of tests/conftest.py's XDIST_GROUPS would lose its group (and the
    work its tests share would be done once per worker again)."""
    assert missing_group_modules(XDIST_GROUPS, ROOT) == []
    assert all(name.startswith("tests/") and name.endswith(".py") for name in XDIST_GROUPS)
    assert missing_group_modules({"tests/app/test_gone.py": "g", "tests/ci/test_codebuild_source.py": "g"}, ROOT) == [
        "tests/app/test_gone.py"
    ]


def test_a_group_is_one_scheduling_unit() -> None:
    """The tests of a grouped module are one unit whatever the test (and a node id that pytest-xdist
    tags `@group` itself stays in its module's group); any other test is a unit of its own."""
    assert xdist_group_of("tests/app/test_wheel.py::test_wheel_carries_every_package_data_file") == "wheel"
    assert xdist_group_of("tests/ci/test_codebuild_source.py::test_the_model_strips_the_modes@wheel") == "wheel"
    assert xdist_group_of("tests/cli/test_main.py::test_bad_config_exits_2_with_one_line[changes0-x]") == "cli-synth-elsewhere"
    assert xdist_group_of("tests/test_catalog.py::test_gpu_figures") == "tests/test_catalog.py::test_gpu_figures"


def test_make_test_distributes_by_xdist_group() -> None:
    """pyproject.toml's addopts give every pytest run `--dist loadgroup`, `make test`'s too."""
    import tomllib

    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert addopts[addopts.index("--dist") + 1] == "loadgroup"


def make_test_pytest_line(makefile: str) -> str:
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    (line,) = [line for line in recipe.splitlines() if " -m pytest" in line]
    return line


def test_make_test_sizes_its_workers_by_memory() -> None:
    """`-n auto` starts a worker per core whatever the memory: 8 on CodeBuild's LARGE."""
    line = make_test_pytest_line((ROOT / "Makefile").read_text())
    assert "-n auto" not in line and ".ci/pytest_workers.py" in line, line
    # the test of the test: the line as it was
    assert "-n auto" in make_test_pytest_line("x:\n\ntest: setup\n\tFMINFRA_REQUIRE_CHECKOV=1 $(PY) -m pytest -n auto\n\nlint:\n")


# --------------------------------------------------------------------------------------------
# make test itself, in an extracted archive of the next commit

# A representative set: every test that lists the repository's files (test_facts: git ls-files
# until issue 33), this file's .git-free checks, and the package-layout rules (they read the tree).
REPRESENTATIVE = "tests/app/test_facts.py tests/ci/test_codebuild_source.py tests/test_layout.py"


def _without_modes(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """A member as CodePipeline's zip extracts: no external attributes, so files 0644 and folders
    0755 whatever git recorded (docs/facts/pipeline.md#codepipeline-source-zip-no-modes)."""
    member = tarfile.tar_filter(member, dest)
    return member.replace(mode=0o755 if member.isdir() else 0o644, deep=False)


def strip_modes(root: Path) -> None:
    """What the extraction above does, for a tree already on disk."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def _archive(dest: Path) -> None:
    """What CodePipeline hands CodeBuild after a push of this working tree: the files of the next
    commit (tracked, with their changes, plus new untracked ones), without .git and without modes."""

    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout

    # `stash create` exits 1, printing nothing, when the index holds a file whose stat changed and whose
    # content did not (touched): a refresh first (its own exit is non-zero when files did change).
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=ROOT, capture_output=True, check=False)
    ref = git("stash", "create").decode().strip() or "HEAD"
    tar = dest.parent / "source.tar"
    tar.write_bytes(git("archive", "--format=tar", ref))
    with tarfile.open(tar) as archive:
        archive.extractall(dest, filter=_without_modes)
    for name in git("ls-files", "-o", "--exclude-standard", "-z").decode().split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, dest / name)
            (dest / name).chmod(0o644)


def _setup_folders(src: Path) -> None:
    """What `make setup` leaves in the source folder, from this checkout's installed copies: .venv
    and node_modules linked (ruff excludes both by name); .venv-checkov a real folder, as make
    setup creates it, its bin, include and lib linked and its share/ copied: pip installs
    networkx's example scripts (.py files) into share/doc there, outside site-packages, which
    ruff's own defaults exclude (docs/facts/pipeline.md#ruff-gitignore-without-git)."""
    for name in (".venv", "node_modules"):
        (src / name).symlink_to((ROOT / name).resolve())
    real = (ROOT / ".venv-checkov").resolve()
    venv = src / ".venv-checkov"
    venv.mkdir()
    for entry in sorted(real.iterdir()):
        if entry.name == "share":
            shutil.copytree(entry, venv / "share", symlinks=True)
        elif entry.is_dir():
            (venv / entry.name).symlink_to(entry)
        else:
            shutil.copy2(entry, venv / entry.name, follow_symlinks=False)
    assert list((venv / "share").rglob("*.py")), "the checkov venv has no .py files outside site-packages to model"
    # already installed: the markers stay newer than what they depend on
    for name in load_script(ROOT / "scripts" / "bench_test.py").MARKER_INPUTS:
        os.utime(src / name, (946684800, 946684800))


def test_the_archive_of_a_touched_but_unchanged_file_is_heads(tmp_path: Path) -> None:
    """A tracked file whose mtime changed and whose content did not (an editor's save, `make setup`'s
    markers): `git stash create` exits 1 and prints nothing unless the index is refreshed first."""
    if git_files(ROOT) is None:
        pytest.skip("no .git here")
    path = ROOT / "tests" / "ci" / "__init__.py"
    before = path.stat()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    try:
        dest = tmp_path / "src"
        dest.mkdir()
        _archive(dest)
    finally:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (dest / "tests" / "ci" / "__init__.py").read_bytes() == path.read_bytes()


def test_make_test_runs_in_codebuilds_shape(tmp_path: Path) -> None:
    """`make test` (ruff, ruff format, pytest on REPRESENTATIVE, no workers) in a fresh bash,
    PATH=/usr/bin:/bin, not root, in the extracted archive: no .git anywhere above it."""
    from tests.app.test_workflows import ENVIRONMENT_FAILURES, ci_environment

    if git_files(ROOT) is None:
        pytest.skip("no .git here: this run already is the archive's shape")
    for marker in (ROOT / ".venv" / ".installed", ROOT / "node_modules" / ".installed", ROOT / ".venv-checkov" / ".installed"):
        if not marker.is_file():
            pytest.skip(f"{marker.relative_to(ROOT)} missing: run `make setup` first")
    src = tmp_path / "src"
    src.mkdir()
    _archive(src)
    assert not (src / ".git").exists()
    assert not [p for p in src.rglob("*") if p.is_file() and p.stat().st_mode & 0o111], "the model keeps a mode"
    _setup_folders(src)
    env, _ = ci_environment(tmp_path, src)
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)  # git finds no repository above the source either
    command = f"make test TEST_WORKERS=0 PYTEST_ARGS='-p no:cacheprovider {REPRESENTATIVE} -k \"not codebuilds_shape\"'"
    result = subprocess.run(
        ["/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert not ENVIRONMENT_FAILURES.search(output), output[-4000:]
    assert re.search(r"\d+ passed", output), output[-2000:]


# --------------------------------------------------------------------------------------------
# the wheel's modes come from setup.py's rule, not from the source's


def wheel_mode_problems(wheel: Path) -> list[str]:
    """`path: mode` of every packaged script whose mode in the wheel breaks setup.py's rule: a file
    under fminfra/_scripts/ that starts with `#!` is 0755, every other one 0644."""
    problems = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if not info.filename.startswith("fminfra/_scripts/") or info.is_dir():
                continue
            mode = (info.external_attr >> 16) & 0o777
            wanted = 0o755 if zf.read(info).startswith(b"#!") else 0o644
            if mode != wanted:
                problems.append(f"{info.filename}: {mode:o}, the rule says {wanted:o}")
    return problems


def test_the_wheel_makes_the_scripts_executable_from_a_source_without_modes(built_wheel: Built) -> None:
    """CodePipeline's source has every file 0644; the wheel built from it (the session's one wheel:
    tests/conftest.py's built_wheel; tests/app/test_wheel.py runs bootstrap.sh's mode check on it
    installed) still has the scripts executable, by setup.py's rule."""
    wheel = built_wheel.wheel
    assert wheel_mode_problems(wheel) == []
    with zipfile.ZipFile(wheel) as zf:
        assert (zf.getinfo("fminfra/_scripts/node/bootstrap.sh").external_attr >> 16) & 0o777 == 0o755
        assert (zf.getinfo("fminfra/_scripts/node/versions.env").external_attr >> 16) & 0o777 == 0o644


def test_the_wheel_mode_check_can_fail(tmp_path: Path) -> None:
    """A test of the test: a wheel as the copy that kept the source's modes built it in CodeBuild."""
    wheel = tmp_path / "fminfra-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text, mode in (
            ("fminfra/_scripts/node/bootstrap.sh", "#!/usr/bin/env bash\n", 0o644),
            ("fminfra/_scripts/node/versions.env", "NCCL_VERSION=1\n", 0o755),
            ("fminfra/_scripts/node/lib.sh", "# sourced\n", 0o644),
        ):
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, text)
    assert wheel_mode_problems(wheel) == [
        "fminfra/_scripts/node/bootstrap.sh: 644, the rule says 755",
        "fminfra/_scripts/node/versions.env: 755, the rule says 644",
    ]


def test_the_model_strips_the_modes(tmp_path: Path) -> None:
    """The archive's extraction filter resets what `git archive` keeps (100755)."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        tar.add(script, arcname="run.sh")
    with tarfile.open(tmp_path / "a.tar") as tar:
        assert tar.getmember("run.sh").mode == 0o755
        tar.extractall(tmp_path / "out", filter=_without_modes)
    assert (tmp_path / "out" / "run.sh").stat().st_mode & 0o777 == 0o644
