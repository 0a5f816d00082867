"""Prices for the `cost` command: a dated table of public prices shipped with the package, and the
AWS Price List API for `--live`.

The table (`prices.yaml` beside this module) holds only prices with a public source and the date
they were checked; anything else is "price unknown", never a guess. `--live` asks the Price List
API (`pricing` in boto3), whose endpoints are in us-east-1 and ap-south-1
(docs/facts/pricing.md#price-list-api-endpoints), for the environment's region.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

PRICES_FILE = Path(__file__).with_name("prices.yaml")
# Price List API endpoints (docs/facts/pricing.md#price-list-api-endpoints).
PRICE_LIST_REGIONS = ("us-east-1", "ap-south-1")


@dataclass(frozen=True)
class Price:
    """One unit price in USD, with where it came from."""

    usd: float
    unit: str
    source: str
    checked: str = ""


@cache
def _data() -> dict[str, Any]:
    return dict(yaml.safe_load(PRICES_FILE.read_text(encoding="utf-8")))


@cache
def table() -> dict[tuple[str, str], Price]:
    """(key, region) -> Price, from prices.yaml."""
    return {
        (row["key"], row["region"]): Price(float(row["usd"]), str(row["unit"]), str(row["source"]), str(row["checked"]))
        for row in _data()["prices"]
    }


@cache
def unsourced() -> dict[tuple[str, str], str]:
    """(key, region) -> what was searched, for the prices no public source was found for (prices.yaml's
    `unsourced`; docs/facts/pricing.md#unsourced-prices)."""
    return {(row["key"], region): str(row["searched"]) for row in _data().get("unsourced") or [] for region in row["regions"]}


# The AMP price keys' details in words (amp:ingestion tiers, the managed scraper's two rates).
AMP_WORDS = {
    "next-250b": " (next 250B samples)",
    "over-252b": " (over 252B samples)",
    "scraper": "AMP managed scraper rate per collector-hour",
    "scraper-samples": "AMP managed scraper rate per 10M samples collected",
}


def describe(key: str) -> str:
    """A price key in words, for the message naming the source it lacks."""
    kind, _, detail = key.partition(":")
    if kind == "fsx-lustre" and detail != "metadata-iops":
        deployment, _, tier = detail.partition(":")
        return f"FSx for Lustre {deployment} storage rate" + ("" if tier == "baseline" else f" at {tier} MB/s/TiB")
    words = {
        "ec2": f"EC2 On-Demand Linux rate of {detail}",
        "sagemaker-hyperpod": f"SageMaker HyperPod rate of {detail}",
        "capacity-block": f"Capacity Block rate of {detail}",
        "fsx-lustre": "FSx for Lustre metadata IOPS rate",
        "nat-gateway": "NAT gateway hourly rate",
        "vpc-interface-endpoint": "interface VPC endpoint rate per AZ-hour",
        "eks-cluster": f"EKS control plane rate ({detail} support)",
        "grafana": f"Managed Grafana {detail} user rate",
        "amp": AMP_WORDS.get(detail, "AMP sample ingestion rate" + AMP_WORDS.get(detail.partition(":")[2], "")),
        "ebs": f"EBS {detail} storage rate per GB-month",
        "hyperpod-ebs": "SageMaker HyperPod instance storage (EBS) rate per GB-month",
    }
    return words.get(kind, key)


class PriceBook:
    """Looks a price up in the table, or (live) in the Price List API; None when unknown."""

    def __init__(self, region: str, *, pricing_client: Any = None) -> None:
        self.region = region
        self.client = pricing_client
        self._live: dict[str, Price | None] = {}

    def get(self, key: str) -> Price | None:
        if self.client is not None:
            if key not in self._live:
                self._live[key] = live_price(self.client, key, self.region)
            if self._live[key] is not None:
                return self._live[key]
        return table().get((key, self.region))

    def missing(self, key: str) -> str:
        """The source an unknown price lacks, for the output (never a guess): what was searched when
        prices.yaml records it, else the regions the table has the key for."""
        searched = unsourced().get((key, self.region))
        other = sorted(region for k, region in table() if k == key)
        why = (
            f"searched: {searched}"
            if searched
            else f"fminfra/ops/pricing/prices.yaml has {key} only for {', '.join(other)}"
            if other
            else ""
        )
        live = "" if self.client is None else "; the Price List API gave no single answer"
        return f"no public source recorded for the {describe(key)} in {self.region}" + (f" ({why})" if why else "") + live


# What each key asks the Price List API: service code and exact-match filters. Only keys whose
# product attributes are documented by the service's price list are asked; the others stay on
# the table (docs/facts/pricing.md#price-list-api-attributes).
def _query(key: str, region: str) -> tuple[str, dict[str, str]] | None:
    kind, _, detail = key.partition(":")
    if kind == "ec2":
        return "AmazonEC2", {
            "instanceType": detail,
            "regionCode": region,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
        }
    if kind == "sagemaker-hyperpod":
        return "AmazonSageMaker", {"instanceName": detail, "regionCode": region}
    if kind == "nat-gateway":
        return "AmazonEC2", {"productFamily": "NAT Gateway", "regionCode": region, "group": "NGW:NatGateway"}
    return None


def live_price(client: Any, key: str, region: str) -> Price | None:
    """The On-Demand USD price of one key from GetProducts, or None when the API has no single answer."""
    query = _query(key, region)
    if query is None:
        return None
    service, filters = query
    response = client.get_products(
        ServiceCode=service,
        Filters=[{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in filters.items()],
        MaxResults=100,
    )
    prices: set[tuple[float, str]] = set()
    for item in response.get("PriceList", []):
        product = json.loads(item) if isinstance(item, str) else item
        if key.startswith("sagemaker-hyperpod:") and not _is_hyperpod(product):
            continue
        for term in (product.get("terms", {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = float(dimension.get("pricePerUnit", {}).get("USD", "0") or 0)
                if usd > 0:
                    prices.add((usd, str(dimension.get("unit", "")).lower()))
    if len(prices) != 1:  # none, or several products the filters cannot tell apart: do not pick one
        return None
    ((usd, unit),) = prices
    return Price(usd, "hour" if unit.startswith("h") else unit, f"AWS Price List API, {service}, {region} (--live)")


def _is_hyperpod(product: dict[str, Any]) -> bool:
    """SageMaker products of HyperPod clusters: their component or usage type names the cluster."""
    attributes = product.get("product", {}).get("attributes", {})
    text = f"{attributes.get('component', '')} {attributes.get('usagetype', '')}".lower()
    return "hyperpod" in text or "cluster" in text
