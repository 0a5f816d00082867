"""`fminfra cost`: figures computed here by hand from the price table (never by the code under
test), idle reserved capacity, an up-front fee's window, unknown prices labelled, and `--live`
against botocore's Stubber with the Price List API's response shape (PriceList: JSON strings)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fminfra.capacity.rules import RESERVATION_TYPES
from fminfra.cli.main import main
from fminfra.config import load_config
from fminfra.ops.cost import HOURS_PER_MONTH, RESERVED, RUNNING, UPFRONT, estimate
from fminfra.ops.pricing import PriceBook, live_price, table
from tests.conftest import ROOT, Synth


def _price(key: str, region: str) -> float:
    return table()[(key, region)].usd


def test_odcr_bills_while_idle_and_a_capacity_block_shows_its_window_total(synth: Synth) -> None:
    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    p5en, nat = _price("ec2:p5en.48xlarge", "us-east-2"), _price("nat-gateway", "us-east-2")
    (odcr,) = [i for i in est.items if i.kind == RESERVED]
    assert odcr.quantity == 2 and odcr.per_hour == pytest.approx(2 * p5en)
    (fee,) = [i for i in est.items if i.kind == UPFRONT]
    assert fee.usd_each == 42000.5 and "168 h window" in fee.name
    # Instances in the reservation and in the block add nothing per hour: the reservation and the fee pay for them.
    assert all(i.per_hour == 0 for i in est.items if i.kind == RUNNING)
    summary = est.summary()
    expected_hourly = 2 * p5en + 1 * nat  # one NAT gateway (compute AZ only)
    assert summary["per_hour_running"] == pytest.approx(expected_hourly, abs=1e-3)
    assert summary["per_month"] == pytest.approx(expected_hourly * HOURS_PER_MONTH, abs=0.01)
    assert summary["idle_per_month"] == pytest.approx(expected_hourly * HOURS_PER_MONTH, abs=0.01)
    assert summary["paid_up_front"] == 42000.5
    assert summary["per_gpu_hour"] == pytest.approx(expected_hourly / (6 * 8), abs=1e-3)


def test_unknown_prices_are_labelled_and_left_out_of_totals(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(ROOT / "config" / "dev.yaml"), "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    assert "workers: 2 x ml.p5.48xlarge (HyperPod)" in out
    assert "price unknown" in out
    assert "have no known price and are not in the totals: the totals are a lower bound (try --live)" in out


def test_cost_json_lists_every_gpu_group(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "staging", "--outdir", str(synth.outdir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [i["name"] for i in data["items"]]
    assert any(n.startswith("workers: 2 x ml.p5en.48xlarge") for n in names)
    assert any("g6e.12xlarge (EKS, up to 4)" in n for n in names)


def test_cost_without_a_synthesized_environment_is_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "dev", "--outdir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"{tmp_path}: (folder): no cloud assembly (manifest.json) or templates (*.template.json) here; run `make synth` first\n"
    )


def _product(usd: str, attributes: dict[str, str]) -> str:
    """One GetProducts PriceList entry, shaped as the Price List API returns it (a JSON string)."""
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": "SKU1"},
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    "SKU1.JRTCKXETXF": {
                        "priceDimensions": {
                            "SKU1.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}, "description": "x"}
                        },
                        "sku": "SKU1",
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                }
            },
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
        }
    )


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--hours-per-month", "-5", "must be more than 0 and at most 744, got -5"),
        ("--hours-per-month", "0", "must be more than 0 and at most 744, got 0"),
        ("--hours-per-month", "1000", "must be more than 0 and at most 744, got 1000"),
        ("--grafana-editors", "-1", "must be 0 or more, got -1"),
        ("--amp-samples-per-second", "x", "must be a number, got 'x'"),
    ],
)
def test_an_assumption_out_of_range_is_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    # Before: a negative month priced every hourly item negative, and exit 0.
    assert main(["cost", "dev", "--outdir", str(tmp_path), flag, value]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"argument {flag}: {message}")


def test_live_prices_come_from_the_price_list_api() -> None:
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    filters = [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "p5.48xlarge"},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-west-2"},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    stub.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [_product("55.04", {"instanceType": "p5.48xlarge"})]},
        {"ServiceCode": "AmazonEC2", "Filters": filters, "MaxResults": 100},
    )
    # Two products the filters cannot tell apart: no single answer, so no price (never a pick).
    stub.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [_product("1.0", {}), _product("2.0", {})]},
        {
            "ServiceCode": "AmazonEC2",
            "Filters": [{**f, "Value": "g6.xlarge"} if f["Field"] == "instanceType" else f for f in filters],
            "MaxResults": 100,
        },
    )
    with stub:
        found = live_price(client, "ec2:p5.48xlarge", "us-west-2")
        assert found is not None and found.usd == 55.04 and found.unit == "hour"
        assert live_price(client, "ec2:g6.xlarge", "us-west-2") is None
    assert live_price(client, "grafana:editor", "us-west-2") is None  # not asked: no documented attributes


def test_a_live_book_falls_back_to_the_table() -> None:
    class NoAnswer:
        def get_products(self, **_: Any) -> dict[str, Any]:
            return {"PriceList": []}

    book = PriceBook("us-east-2", pricing_client=NoAnswer())
    price = book.get("nat-gateway")
    assert price is not None and price.usd == _price("nat-gateway", "us-east-2")


def test_baseline_shows_the_monthly_cost_before_and_after(synth: Synth, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A pull request that doubles the reservation: before (the baseline) and after, for the job summary."""
    from fminfra.ops.guard import read_templates, write_baseline

    templates = read_templates(synth.outdir, "cost-ec2")
    for template in templates.values():
        for res in template.get("Resources", {}).values():
            if res["Type"] in RESERVATION_TYPES:
                res["Properties"]["InstanceCount"] = 1
    write_baseline(templates, tmp_path)
    config = str(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    assert main(["cost", config, "--outdir", str(synth.outdir), "--baseline", str(tmp_path), "--markdown"]) == 0
    out = capsys.readouterr().out
    p5en, nat = _price("ec2:p5en.48xlarge", "us-east-2"), _price("nat-gateway", "us-east-2")
    before, after = (1 * p5en + nat) * HOURS_PER_MONTH, (2 * p5en + nat) * HOURS_PER_MONTH
    assert f"| per month | ${before:,.2f} | ${after:,.2f} |" in out
