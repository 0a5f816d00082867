"""The catalog's EFA layouts against the gpu-* entries of docs/facts/instances.md and docs/facts/network.md#efa-card0-interface-types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fminfra import catalog
from fminfra.core.errors import ValidationError

# (type, network cards, max EFA, card 0 carries EFA) as docs/facts/instances.md lists them.
FACTS = [
    ("p4d.24xlarge", 4, 4, True),
    ("p4de.24xlarge", 4, 4, True),
    ("p5.48xlarge", 32, 32, True),
    ("p5e.48xlarge", 32, 32, True),
    ("p5en.48xlarge", 16, 16, True),
    ("p6-b200.48xlarge", 8, 8, True),
    ("p6-b300.48xlarge", 17, 16, False),
]


@pytest.mark.parametrize(("name", "cards", "max_efa", "card0_efa"), FACTS)
def test_layout_attaches_every_efa_interface(name: str, cards: int, max_efa: int, card0_efa: bool) -> None:
    interfaces = catalog.efa_network_interfaces(name)
    assert interfaces[0] == catalog.NetworkInterfaceSpec(network_card_index=0, device_index=0, interface_type="interface")
    efa = [i for i in interfaces if i.interface_type == "efa-only"]
    assert len(efa) == max_efa
    assert len(interfaces) == max_efa + 1
    assert {i.network_card_index for i in interfaces} == set(range(cards))
    assert any(i.network_card_index == 0 and i.interface_type == "efa-only" for i in efa) is card0_efa
    # One interface per (card, device) slot, never two primaries.
    assert len({(i.network_card_index, i.device_index) for i in interfaces}) == len(interfaces)
    assert [i.interface_type for i in interfaces].count("interface") == 1


def test_p5_has_one_ena_and_32_efa_only() -> None:
    interfaces = catalog.efa_network_interfaces("ml.p5.48xlarge")
    assert len(interfaces) == 33
    assert [(i.network_card_index, i.device_index) for i in interfaces[:3]] == [(0, 0), (0, 1), (1, 0)]


def test_p6_b300_has_no_efa_on_card_zero() -> None:
    interfaces = catalog.efa_network_interfaces("p6-b300.48xlarge")
    assert [i for i in interfaces if i.network_card_index == 0] == [
        catalog.NetworkInterfaceSpec(network_card_index=0, device_index=0, interface_type="interface")
    ]
    assert sorted(i.network_card_index for i in interfaces if i.interface_type == "efa-only") == list(range(1, 17))


def test_inference_types_get_the_primary_only() -> None:
    assert [i.interface_type for i in catalog.efa_network_interfaces("g6e.12xlarge")] == ["interface"]


def test_unverified_type_is_marked() -> None:
    assert catalog.get("p6e-gb200.36xlarge").verified is False
    assert all(catalog.get(n).verified for n, *_ in FACTS)


def test_unknown_type_names_the_known_ones() -> None:
    with pytest.raises(ValidationError, match=r"'p9.48xlarge' is not in the GPU catalog; known: p4d.24xlarge"):
        catalog.get("p9.48xlarge")


def test_gpu_figures() -> None:
    assert (catalog.get("p5.48xlarge").gpus, catalog.get("p5.48xlarge").network_gbps) == (8, 3200)
    assert catalog.get("p6-b300.48xlarge").network_gbps == 6400
    assert catalog.get("p5en.48xlarge").hyperpod_name == "ml.p5en.48xlarge"


def _moto_instance_types() -> dict[str, dict]:
    """EC2's DescribeInstanceTypes data as moto ships it (docs/facts/instances.md: the gpu-* entries' source)."""
    import gzip
    import json
    from pathlib import Path

    import moto

    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _published_row(data: dict) -> tuple:
    gpu = data["GpuInfo"]["Gpus"][0]
    network = data["NetworkInfo"]
    return (
        gpu["Name"],
        gpu["Count"],
        round(gpu["MemoryInfo"]["SizeInMiB"] / 1024),
        data["VCpuInfo"]["DefaultVCpus"],
        data["ProcessorInfo"]["SupportedArchitectures"][0],
        network["MaximumNetworkCards"],
        (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0),
        int(network["NetworkPerformance"].split()[-2].removeprefix("Up to ")) if "x " not in network["NetworkPerformance"] else None,
    )


def _catalog_row(spec: catalog.GpuInstanceType) -> tuple:
    return (
        spec.gpu_model,
        spec.gpus,
        spec.gpu_memory_gib,
        spec.vcpus,
        spec.architecture,
        spec.network_cards,
        spec.max_efa_interfaces,
        spec.network_gbps,
    )


def catalog_differences(published: dict[str, dict]) -> list[str]:
    differences = []
    for name, spec in catalog.CATALOG.items():
        if name not in published:
            if spec.verified:
                differences.append(f"{name}: not in EC2's data but marked verified")
            continue
        theirs = _published_row(published[name])
        ours = _catalog_row(spec)
        if theirs[-1] is None:  # "4x 100 Gigabit" (p4d): compare the sum
            cards, gbps = published[name]["NetworkInfo"]["NetworkPerformance"].split("x ")
            theirs = (*theirs[:-1], int(cards) * int(gbps.split()[0]))
        if theirs != ours:
            differences.append(f"{name}: catalog {ours} != EC2 {theirs}")
    return differences


def test_every_catalog_row_equals_ec2s_published_figures() -> None:
    """GPU model, count, memory (GiB, rounded), vCPUs, architecture, network cards, EFA maximum and
    bandwidth of every type, against DescribeInstanceTypes as moto ships it."""
    assert catalog_differences(_moto_instance_types()) == []


def test_the_catalog_comparison_catches_a_wrong_row() -> None:
    published = _moto_instance_types()
    broken = json.loads(json.dumps(published["g6e.48xlarge"]))
    broken["NetworkInfo"]["MaximumNetworkCards"] = 1
    assert catalog_differences({**published, "g6e.48xlarge": broken}) == [
        "g6e.48xlarge: catalog ('L40S', 8, 45, 192, 'x86_64', 4, 4, 400) != EC2 ('L40S', 8, 45, 192, 'x86_64', 1, 4, 400)"
    ]


def test_the_node_table_is_rendered_from_the_catalog() -> None:
    # scripts/node/instance_types.tsv is generated (`make instance-table`); a hand edit, or a catalog
    # change without regenerating, fails here.
    table = Path(__file__).resolve().parent.parent / "scripts" / "node" / "instance_types.tsv"
    assert table.read_text() == catalog.node_table()


def test_a_catalog_change_changes_the_node_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    before = catalog.node_table()
    changed = tuple(dataclasses.replace(t, nccl_fail_gbps=None, nccl_warn_gbps=None) for t in catalog._TYPES)
    monkeypatch.setattr(catalog, "_TYPES", changed)
    after = catalog.node_table()
    assert after != before
    p5 = next(line for line in after.splitlines() if line.startswith("p5.48xlarge "))
    assert p5.split() == ["p5.48xlarge", "8", "32", "yes", "fm", "x86_64", "-", "-"]


def test_only_measured_types_have_nccl_thresholds() -> None:
    # docs/facts/instances.md#nccl-allreduce-p5-two-node (measured on 2x p5.48xlarge) and #nccl-allreduce-ci-gate-250:
    # fail below 250 GB/s, warn below 400.
    measured = {t.name: (t.nccl_fail_gbps, t.nccl_warn_gbps) for t in catalog.CATALOG.values() if t.nccl_fail_gbps is not None}
    assert measured == {"p5.48xlarge": (250, 400)}
