"""GPU instance facts: one table, one source of truth.

Figures come from EC2 DescribeInstanceTypes data and the EFA user guide, as collected in
docs/facts/instances.md (one gpu-* entry per type). The EFA layout of a launch template is derived from these
facts by `efa_network_interfaces`, never written by hand elsewhere. The table the node scripts read,
scripts/node/instance_types.tsv, is rendered from this one by `node_table` (`make instance-table`
writes it; tests/test_catalog.py fails when the file and the catalog differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fminfra.core.errors import ValidationError

InterfaceType = Literal["interface", "efa", "efa-only"]
# What the NVLink fabric needs on the node (docs/facts/node-software.md#nvlink-fabric-software).
Fabric = Literal["fm", "fm+nvlsm", "imex", "-"]


@dataclass(frozen=True, kw_only=True)
class GpuInstanceType:
    """Facts about one EC2 GPU instance type.

    `training` marks the P-family types built for multi-node training over EFA; only those can
    be training groups. G-family types serve inference and get a single ENA interface.
    """

    name: str
    gpu_model: str
    gpus: int
    gpu_memory_gib: int
    vcpus: int | None
    architecture: Literal["x86_64", "arm64"]
    network_cards: int
    max_efa_interfaces: int
    network_gbps: int
    card0_efa: bool
    efa_generation: int | None
    nvswitch: bool
    training: bool
    verified: bool = True
    fabric: Fabric = "-"
    # Two-node all_reduce_perf bus bandwidth thresholds (GB/s, 1-2 GiB messages), only for types measured.
    nccl_fail_gbps: int | None = None
    nccl_warn_gbps: int | None = None
    # Layers of network nodes EC2's topology APIs return for the type (top of the hierarchy first, the
    # last one attached to the instance); None: the type has no EC2 topology
    # (docs/facts/instances.md#ec2-topology-network-layers).
    network_layers: int | None = None

    @property
    def hyperpod_name(self) -> str:
        """The SageMaker HyperPod form of the name (ml.p5.48xlarge)."""
        return f"ml.{self.name}"

    @property
    def family(self) -> str:
        """The instance family before the size (p5en, p6-b200, g6e)."""
        return self.name.split(".", 1)[0]


@dataclass(frozen=True, kw_only=True)
class NetworkInterfaceSpec:
    """One launch-template network interface: which card, which device slot, which kind."""

    network_card_index: int
    device_index: int
    interface_type: InterfaceType


def _p(
    name: str,
    gpu_model: str,
    gpu_memory_gib: int,
    *,
    cards: int,
    efa: int,
    gbps: int,
    card0_efa: bool,
    generation: int,
    gpus: int = 8,
    vcpus: int | None = 192,
    architecture: Literal["x86_64", "arm64"] = "x86_64",
    verified: bool = True,
    fabric: Fabric = "fm",
    nccl_gbps: tuple[int, int] | None = None,
    layers: int = 3,
) -> GpuInstanceType:
    return GpuInstanceType(
        name=name,
        gpu_model=gpu_model,
        gpus=gpus,
        gpu_memory_gib=gpu_memory_gib,
        vcpus=vcpus,
        architecture=architecture,
        network_cards=cards,
        max_efa_interfaces=efa,
        network_gbps=gbps,
        card0_efa=card0_efa,
        efa_generation=generation,
        nvswitch=True,
        training=True,
        verified=verified,
        fabric=fabric,
        nccl_fail_gbps=nccl_gbps[0] if nccl_gbps else None,
        nccl_warn_gbps=nccl_gbps[1] if nccl_gbps else None,
        network_layers=layers,
    )


def _g(
    name: str, gpu_model: str, gpus: int, gpu_memory_gib: int, vcpus: int, gbps: int, *, cards: int = 1, efa: int = 0
) -> GpuInstanceType:
    """An inference (G) type. `cards` and `efa` are the type's own figures; fminfra attaches no
    EFA to G types (`efa_network_interfaces` gives them the primary ENA interface only)."""
    return GpuInstanceType(
        name=name,
        gpu_model=gpu_model,
        gpus=gpus,
        gpu_memory_gib=gpu_memory_gib,
        vcpus=vcpus,
        architecture="x86_64",
        network_cards=cards,
        max_efa_interfaces=efa,
        network_gbps=gbps,
        card0_efa=False,
        efa_generation=None,
        nvswitch=False,
        training=False,
        # of the G families only g6e has an EC2 topology (docs/facts/instances.md#ec2-topology-network-layers)
        network_layers=3 if name.startswith("g6e.") else None,
    )


_TYPES: tuple[GpuInstanceType, ...] = (
    _p("p4d.24xlarge", "A100", 40, cards=4, efa=4, gbps=400, card0_efa=True, generation=1, vcpus=96),
    _p("p4de.24xlarge", "A100", 80, cards=4, efa=4, gbps=400, card0_efa=True, generation=1, vcpus=96),
    # NCCL thresholds: docs/facts/instances.md#nccl-allreduce-p5-two-node (2x p5.48xlarge 437-444 GB/s) and
    # #nccl-allreduce-ci-gate-250 (the ParallelCluster CI gate, 250 GB/s): fail below 250, warn below 400.
    _p("p5.48xlarge", "H100", 80, cards=32, efa=32, gbps=3200, card0_efa=True, generation=2, nccl_gbps=(250, 400)),
    _p("p5e.48xlarge", "H200", 141, cards=32, efa=32, gbps=3200, card0_efa=True, generation=2),
    _p("p5en.48xlarge", "H200", 141, cards=16, efa=16, gbps=3200, card0_efa=True, generation=3),
    _p("p6-b200.48xlarge", "B200", 179, cards=8, efa=8, gbps=3200, card0_efa=True, generation=4, fabric="fm+nvlsm", layers=4),
    _p("p6-b300.48xlarge", "B300", 269, cards=17, efa=16, gbps=6400, card0_efa=False, generation=4, fabric="fm+nvlsm", layers=4),
    # UltraServer node: network figures are unverified (docs/facts/instances.md#gpu-p6e-gb200-36xlarge); plan and synth say so.
    _p(
        "p6e-gb200.36xlarge",
        "GB200",
        185,
        cards=17,
        efa=16,
        gbps=1600,
        card0_efa=False,
        generation=4,
        gpus=4,
        vcpus=None,
        architecture="arm64",
        verified=False,
        fabric="imex",
    ),
    # Inference (G family): the types' own cards and EFA maximum (docs/facts/instances.md#gpu-g5-family,
    # docs/facts/instances.md#gpu-g6-family,
    # docs/facts/instances.md#gpu-g6e-family); fminfra attaches no EFA to them.
    _g("g5.xlarge", "A10G", 1, 22, 4, 10),
    _g("g5.2xlarge", "A10G", 1, 22, 8, 10),
    _g("g5.4xlarge", "A10G", 1, 22, 16, 25),
    _g("g5.8xlarge", "A10G", 1, 22, 32, 25, efa=1),
    _g("g5.12xlarge", "A10G", 4, 22, 48, 40, efa=1),
    _g("g5.16xlarge", "A10G", 1, 22, 64, 25, efa=1),
    _g("g5.24xlarge", "A10G", 4, 22, 96, 50, efa=1),
    _g("g5.48xlarge", "A10G", 8, 22, 192, 100, efa=1),
    _g("g6.xlarge", "L4", 1, 22, 4, 10),
    _g("g6.2xlarge", "L4", 1, 22, 8, 10),
    _g("g6.4xlarge", "L4", 1, 22, 16, 25),
    _g("g6.8xlarge", "L4", 1, 22, 32, 25, efa=1),
    _g("g6.12xlarge", "L4", 4, 22, 48, 40, efa=1),
    _g("g6.16xlarge", "L4", 1, 22, 64, 25, efa=1),
    _g("g6.24xlarge", "L4", 4, 22, 96, 50, efa=1),
    _g("g6.48xlarge", "L4", 8, 22, 192, 100, efa=1),
    _g("g6e.xlarge", "L40S", 1, 45, 4, 20),
    _g("g6e.2xlarge", "L40S", 1, 45, 8, 20),
    _g("g6e.4xlarge", "L40S", 1, 45, 16, 20),
    _g("g6e.8xlarge", "L40S", 1, 45, 32, 25, efa=1),
    _g("g6e.12xlarge", "L40S", 4, 45, 48, 100, efa=1),
    _g("g6e.16xlarge", "L40S", 1, 45, 64, 35, efa=1),
    _g("g6e.24xlarge", "L40S", 4, 45, 96, 200, cards=2, efa=2),
    _g("g6e.48xlarge", "L40S", 8, 45, 192, 400, cards=4, efa=4),
)

CATALOG: dict[str, GpuInstanceType] = {t.name: t for t in _TYPES}
TRAINING_TYPES: tuple[str, ...] = tuple(t.name for t in _TYPES if t.training)


# How each type can be bought, where AWS sells it only some ways: the config's capacity types
# it can use. A type not listed can use every capacity type. p6e-gb200 is sold as UltraServers
# only, through EC2 Capacity Blocks for ML or SageMaker training plans
# (docs/facts/capacity.md#p6e-gb200-ultraserver-purchase).
CAPACITY_TYPES_BY_INSTANCE_TYPE: dict[str, tuple[str, ...]] = {
    "p6e-gb200.36xlarge": ("capacity-block", "training-plan"),
}


def capacity_types(name: str) -> tuple[str, ...] | None:
    """The capacity types a type can use (EC2 or `ml.` name), or None when AWS sells it every way."""
    return CAPACITY_TYPES_BY_INSTANCE_TYPE.get(normalize_instance_type(name))


def normalize_instance_type(name: str) -> str:
    """EC2 form of an instance type name: `ml.p5.48xlarge` -> `p5.48xlarge`."""
    return name[3:] if name.startswith("ml.") else name


def get(name: str) -> GpuInstanceType:
    """The catalog entry for an EC2 or HyperPod (`ml.`) name; ValidationError when unknown."""
    key = normalize_instance_type(name)
    try:
        return CATALOG[key]
    except KeyError:
        raise ValidationError(f"instance type {name!r} is not in the GPU catalog; known: {', '.join(CATALOG)}") from None


def efa_network_interfaces(name: str) -> list[NetworkInterfaceSpec]:
    """Launch-template network interfaces that attach every EFA interface the type has.

    Card 0 device 0 is always a plain ENA `interface` (an `efa-only` interface can never be the
    primary). Where card 0 carries EFA it gets an `efa-only` interface at device 1; every other
    network card gets one `efa-only` interface at device 0. Types without EFA get the primary only.
    """
    spec = get(name)
    interfaces = [NetworkInterfaceSpec(network_card_index=0, device_index=0, interface_type="interface")]
    if not spec.training:
        return interfaces
    if spec.card0_efa:
        interfaces.append(NetworkInterfaceSpec(network_card_index=0, device_index=1, interface_type="efa-only"))
    for card in range(1, spec.network_cards):
        interfaces.append(NetworkInterfaceSpec(network_card_index=card, device_index=0, interface_type="efa-only"))
    efa = sum(1 for i in interfaces if i.interface_type != "interface")
    if efa != spec.max_efa_interfaces:
        raise ValidationError(
            f"catalog entry {spec.name}: layout gives {efa} EFA interfaces but the type has "
            f"{spec.max_efa_interfaces}; fix the catalog's network_cards/card0_efa"
        )
    return interfaces


def attached_efa_interfaces(name: str) -> int:
    """How many EFA interfaces fminfra's launch template attaches for the type."""
    return sum(1 for i in efa_network_interfaces(name) if i.interface_type != "interface")


# The node table's header (scripts/node/lib.sh reads the columns after it by position).
_NODE_TABLE_HEADER = """\
# Per-instance-type facts the node scripts need, one line per type, whitespace-separated.
# Rendered from fminfra/catalog.py by `make instance-table` (tests/test_catalog.py checks it): do not
# edit; efa is the number of EFA devices fminfra's launch templates attach.
# fabric: what the NVLink fabric needs on the node (docs/facts/node-software.md#nvlink-fabric-software):
#   fm        NVIDIA Fabric Manager at the loaded driver's version (HGX boards with NVSwitch);
#   fm+nvlsm  Fabric Manager and the NVLink Subnet Manager (Blackwell HGX: p6-b200, p6-b300);
#   imex      nvidia-imex and no Fabric Manager (p6e-gb200: the NVSwitches are outside the node);
#   -         nothing.
# nvswitch mirrors fminfra/catalog.py (see docs/facts/instances.md#nvswitch-fabric-manager-types).
# nccl_fail_gbps / nccl_warn_gbps: two-node all_reduce_perf bus bandwidth at 1-2 GiB, only for
# types measured (docs/facts/instances.md#nccl-allreduce-p5-two-node: 2x p5.48xlarge 437-444 GB/s; \
docs/facts/instances.md#nccl-allreduce-ci-gate-250: the
# ParallelCluster CI gate 250 GB/s). "-" means no measured threshold: validate.sh reports SKIP.
"""
# Column widths of the table (its own alignment; the scripts split on whitespace).
_NODE_TABLE_WIDTHS = (20, 5, 4, 9, 9, 7, 4)


def node_table() -> str:
    """scripts/node/instance_types.tsv as the catalog gives it: per type, its GPUs, the EFA
    interfaces fminfra attaches, NVSwitch, the NVLink fabric's software, the architecture and the
    measured NCCL thresholds."""

    def row(cells: list[str]) -> str:
        return "".join(c.ljust(w) for c, w in zip(cells, _NODE_TABLE_WIDTHS, strict=False)) + cells[-1]

    lines = [row(["# name", "gpus", "efa", "nvswitch", "fabric", "arch", "nccl_fail_gbps ", "nccl_warn_gbps"])]
    for t in _TYPES:
        efa = attached_efa_interfaces(t.name) if t.training else 0
        fail = "-" if t.nccl_fail_gbps is None else str(t.nccl_fail_gbps)
        warn = "-" if t.nccl_warn_gbps is None else str(t.nccl_warn_gbps)
        lines.append(row([t.name, str(t.gpus), str(efa), "yes" if t.nvswitch else "no", t.fabric, t.architecture, fail, warn]))
    return _NODE_TABLE_HEADER + "\n".join(lines) + "\n"
