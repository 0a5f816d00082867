"""The catalog's EFA layouts against the gpu-* entries of docs/facts/instances.md and docs/facts/network.md#efa-card0-interface-types."""

from __future__ import annotations

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
