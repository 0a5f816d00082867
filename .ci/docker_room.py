#!/usr/bin/env python3
"""Room on the runner for the container images `cdk deploy` builds, before the deploy job runs it.

An environment that serves a model across EFA nodes builds fminfra's EFA image on the vLLM server image
(docs/serving.md#images) while `cdk deploy` publishes its assets, on the machine that deploys. The base image
is about 12 GB compressed and more unpacked, and a GitHub-hosted runner guarantees 14 GB of disk, with its
root file system mostly full and a second, nearly empty disk at /mnt
(docs/facts/pipeline.md#github-runner-disk). So, when the environment's assembly holds a container image:
Docker's data root must have NEEDED_GIB free; if it has not and /mnt has, Docker is moved there
(`data-root` in /etc/docker/daemon.json, then a restart); if neither has, one line says so and the job stops
before CloudFormation starts. An environment with no container image is left alone.

Exit 0: room (or nothing to build); 1: no room; 2: bad input.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

# fminfra's margin, not a sourced figure: the vLLM base image (reported at 12 GB compressed, up to 25 GB:
# docs/facts/pipeline.md#github-runner-disk) unpacked beside its compressed layers, plus the EFA build's layers.
NEEDED_GIB = 40
SPARE = Path("/mnt")
DAEMON_JSON = Path("/etc/docker/daemon.json")


def image_assets(app: Path, environment: str) -> list[str]:
    """The container image assets of the environment's stacks (their `*.assets.json`, `dockerImages`)."""
    folder = app / f"assembly-{environment}"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no assembly of {environment} (run `make synth` first)")
    return sorted(key for f in sorted(folder.glob("*.assets.json")) for key in json.loads(f.read_text()).get("dockerImages", {}))


def decide(images: list[str], root_free_gib: float, spare_free_gib: float | None, needed_gib: float = NEEDED_GIB) -> str:
    """'none' (no image), 'ok' (room where Docker is), 'move' (room on the spare disk only) or 'short'."""
    if not images:
        return "none"
    if root_free_gib >= needed_gib:
        return "ok"
    if spare_free_gib is not None and spare_free_gib >= needed_gib:
        return "move"
    return "short"


def _free_gib(path: Path) -> float:
    return shutil.disk_usage(path).free / 2**30


def _docker_root() -> Path:
    out = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _move_docker(to: Path) -> None:
    current = {}
    if DAEMON_JSON.exists():
        current = json.loads(subprocess.run(["sudo", "cat", str(DAEMON_JSON)], capture_output=True, text=True, check=True).stdout or "{}")
    settings = json.dumps({**current, "data-root": str(to)})
    for command in (
        ["sudo", "systemctl", "stop", "docker", "docker.socket"],
        ["sudo", "mkdir", "-p", str(to)],
        ["sudo", "sh", "-c", f"mkdir -p {DAEMON_JSON.parent} && cat > {DAEMON_JSON}"],
        ["sudo", "systemctl", "start", "docker"],
    ):
        subprocess.run(command, input=settings if "cat" in command[-1] else None, text=True, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", type=Path, default=Path("cdk.out"))
    parser.add_argument("--environment", required=True)
    parser.add_argument("--needed-gib", type=float, default=NEEDED_GIB)
    args = parser.parse_args(argv)
    try:
        images = image_assets(args.app, args.environment)
    except (FileNotFoundError, ValueError) as exc:
        print(f"docker-room: {exc}", file=sys.stderr)
        return 2
    if not images:
        print(f"docker-room: {args.environment} builds no container image: nothing to do")
        return 0
    root = _docker_root()
    root_free = _free_gib(root) if root.exists() else 0.0
    spare_free = _free_gib(SPARE) if SPARE.is_dir() else None
    verdict = decide(images, root_free, spare_free, args.needed_gib)
    where = f"Docker's data root {root} has {root_free:.0f} GiB free"
    if verdict == "ok":
        print(f"docker-room: {args.environment} builds {len(images)} container image(s); {where}, {args.needed_gib:g} needed")
        return 0
    if verdict == "move":
        _move_docker(SPARE / "docker")
        print(f"docker-room: {where}; moved it to {_docker_root()} ({spare_free:.0f} GiB free) for {len(images)} container image(s)")
        return 0
    print(
        f"docker-room: {args.environment} builds {len(images)} container image(s) (the serving EFA image: docs/serving.md#images), "
        f"which need {args.needed_gib:g} GiB; {where}"
        + (f" and {SPARE} {spare_free:.0f} GiB" if spare_free is not None else "")
        + ": deploy it from a larger or self-hosted runner",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
