"""`show CONFIG`: the effective config, every default filled in, as YAML (like eksctl's dry run).

What fminfra derives from the config (the subnet plan, a file system's capacity from its target
throughput) follows as comments, so the output still reads back as the same config.
"""

from __future__ import annotations

import argparse

import yaml

from fminfra.config import EnvironmentConfig
from fminfra.ops.common import EXIT_OK, load_configs


def derived_lines(cfg: EnvironmentConfig) -> list[str]:
    """What the config implies but does not say, one comment line each."""
    lines = ["# derived:"]
    for subnet in cfg.network.subnets():
        lines.append(f"#   subnet {subnet.name}: {subnet.cidr} in {subnet.az_id}")
    lustre = cfg.storage.lustre if cfg.storage else None
    if lustre is not None:
        lines.append(f"#   storage.lustre: {lustre.capacity_gib} GiB, {lustre.throughput_gb_per_s:.2f} GB/s")
    lines.append(f"#   physical name prefix: {cfg.physical_name()}")
    return lines


def render(cfg: EnvironmentConfig) -> str:
    data = cfg.model_dump(mode="json", by_alias=True)
    body = yaml.safe_dump(data, sort_keys=False, width=120)
    return body + "\n".join(derived_lines(cfg)) + "\n"


def command(ns: argparse.Namespace) -> int:
    (_, cfg), *_ = load_configs([ns.config])
    print(render(cfg), end="")
    return EXIT_OK
