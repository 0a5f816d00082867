"""`fminfra cost`: figures computed here by hand from the price table (never by the code under
test), idle reserved capacity, an up-front fee's window, unknown prices labelled, and `--live`
against botocore's Stubber with the Price List API's response shape (PriceList: JSON strings)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fminfra import catalog
from fminfra.capacity.rules import RESERVATION_TYPES
from fminfra.cli.main import main
from fminfra.config import load_config
from fminfra.ops.cost import (
    EXISTING_RESERVATION_ASSUMPTION,
    FIXED,
    HOURS_PER_MONTH,
    RESERVED,
    RUNNING,
    TRAINING_PLAN_FEE_UNKNOWN,
    UPFRONT,
    Estimate,
    estimate,
)
from fminfra.ops.pricing import PriceBook, live_price, table, unsourced
from tests.conftest import EXAMPLE_CONFIGS, ROOT, SHIPPED_CONFIGS, Synth


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
    assert all(i.per_hour == 0 for i in est.items if i.kind == RUNNING and i.unit == "instance-hour")
    summary = est.summary()
    expected_hourly = 2 * p5en + 1 * nat  # one NAT gateway (compute AZ only)
    assert summary["per_hour_running"] == pytest.approx(expected_hourly, abs=1e-3)
    assert summary["per_month"] == pytest.approx(expected_hourly * HOURS_PER_MONTH, abs=0.01)
    assert summary["idle_per_month"] == pytest.approx(expected_hourly * HOURS_PER_MONTH, abs=0.01)
    assert summary["paid_up_front"] == 42000.5
    # a per-GPU-hour figure only when every price is known: not here (interface endpoints, AMP)
    assert est.unknown and summary["per_gpu_hour"] is None
    priced = dataclasses.replace(est, items=[i for i in est.items if i not in est.unknown])
    # the block's 4 x 8 GPUs are left out: its fee is paid up front, not in the hourly total (newcomer read, C)
    assert priced.gpus == 2 * 8 and priced.prepaid_gpus == 4 * 8
    assert priced.summary()["per_gpu_hour"] == pytest.approx(expected_hourly / (2 * 8), abs=1e-3)


def test_unknown_prices_are_labelled_and_left_out_of_totals(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(ROOT / "config" / "dev.yaml"), "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    assert "workers: 2 x ml.p5.48xlarge (HyperPod)" in out
    assert "price unknown" in out
    assert "have no known price and are not in the totals: the totals are a lower bound (try --live)" in out
    # no per-GPU-hour figure from a lower bound, and every total says it is one (newcomer read, C)
    assert "per GPU-hour: unknown until every price is known (16 GPUs)" in out and "per GPU-hour: $" not in out
    assert "bills while idle (reserved and fixed): at least $" in out and "paid up front: at least $" in out


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


def test_an_existing_reservation_bills_while_idle_at_its_on_demand_rate(synth: Synth) -> None:
    """Before: groups on existing reservations showed $0/instance-hour and nothing billed while idle."""
    cfg = load_config(ROOT / "tests" / "configs" / "capacity-ec2.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    reserved = {i.name: i for i in est.items if i.kind == RESERVED and "(existing)" in i.name}
    four = reserved["reservations for reserved: 4 x p5en.48xlarge (existing)"]
    assert four.key == "ec2:p5en.48xlarge" and four.per_hour == pytest.approx(4 * _price("ec2:p5en.48xlarge", "us-west-2"))
    one = reserved["reservations for reserved-one: 1 x p5e.48xlarge (existing)"]
    assert one.per_hour is None and one.source.startswith(
        "price unknown: no public source recorded for the EC2 On-Demand Linux rate of p5e.48xlarge in us-west-2"
    )
    assert est.summary()["idle_per_month"] >= 4 * _price("ec2:p5en.48xlarge", "us-west-2") * HOURS_PER_MONTH


def test_an_unknown_price_says_what_is_missing(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "dev", "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    assert (
        "workers: 2 x ml.p5.48xlarge (HyperPod): price unknown: no public source recorded for the SageMaker HyperPod rate of"
        " ml.p5.48xlarge in us-west-2 (searched: "
    ) in out
    assert "no public source recorded for the FSx for Lustre scratch_2 storage rate in us-west-2 (searched: " in out


def test_an_unknown_price_without_a_search_record_names_the_regions_the_table_has() -> None:
    assert PriceBook("eu-west-3").missing("nat-gateway") == (
        "no public source recorded for the NAT gateway hourly rate in eu-west-3"
        " (fminfra/ops/pricing/prices.yaml has nat-gateway only for eu-west-1, us-east-1, us-east-2, us-west-2)"
    )
    assert (
        PriceBook("eu-west-3").missing("fsx-lustre:metadata-iops")
        == "no public source recorded for the FSx for Lustre metadata IOPS rate in eu-west-3"
    )


def test_an_eks_inference_group_in_eu_west_1_is_priced(synth: Synth) -> None:
    """Before: the table held no G price, so an inference-only environment totalled "at least $0.00"."""
    cfg = load_config(ROOT / "tests" / "configs" / "eks-inference-only.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    (group,) = [i for i in est.items if i.key == "ec2:g5.12xlarge"]
    assert group.per_hour == pytest.approx(1 * 6.33167)  # catalog row g5.12xlarge, eu-west-1 (prices.yaml's source)


def test_a_table_capacity_block_fee_is_marked_indicative(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(ROOT / "examples" / "ec2-capacity-block.yaml"), "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    assert "assumption: Capacity Block fee: indicative only; block prices move with supply and demand" in out
    assert "the operating system is billed separately while instances run: that OS fee is not included" in out


def test_a_block_fee_the_config_gives_is_not_called_indicative(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: every Capacity Block line said "indicative only ... (--live quotes it)", even for the fee actually paid."""
    assert main(["cost", str(ROOT / "tests" / "configs" / "cost-ec2.yaml"), "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    assert "indicative only" not in out and "--live quotes it" not in out
    assert "assumption: Capacity Block fee: the config's capacity.upfront_fee_usd; the operating system is billed separately" in out


def test_a_capacity_block_without_a_fee_is_priced_at_the_tables_indicative_rate(synth: Synth) -> None:
    """Before: the example's block (no upfront_fee_usd) was "price unknown" offline."""
    cfg = load_config(ROOT / "examples" / "ec2-capacity-block.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    (fee,) = [i for i in est.items if i.kind == UPFRONT]
    rate = _price("capacity-block:p6-b200.48xlarge", "us-west-2")
    assert rate == 74.88  # koyakimu/ec2-capacity-blocks-for-ml-pricing-json, 2026-02-01 (prices.yaml's source)
    assert fee.name == "block: capacity-block fee, 168 h window (8 x 168 instance-hours, indicative)"
    assert fee.per_hour is None and est.summary()["paid_up_front"] == pytest.approx(8 * 168 * rate)
    assert "indicative only" in fee.assumption and "OS fee is not included" in fee.assumption


def test_a_capacity_block_fee_is_quoted_live_from_describe_capacity_block_offerings(synth: Synth) -> None:
    """Stubber validates requests and responses against botocore's EC2 model."""
    from datetime import UTC, datetime

    from fminfra.ops.cost import LIVE_QUOTE_SOURCE

    cfg = load_config(ROOT / "examples" / "ec2-capacity-block.yaml")
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    start, end = datetime(2027, 1, 10, 11, 30, tzinfo=UTC), datetime(2027, 1, 17, 11, 30, tzinfo=UTC)

    def offering(oid: str, fee: str) -> dict[str, Any]:
        return {
            "CapacityBlockOfferingId": oid,
            "InstanceType": "p6-b200.48xlarge",
            "AvailabilityZone": "us-west-2a",
            "InstanceCount": 8,
            "StartDate": start,
            "EndDate": end,
            "CapacityBlockDurationHours": 168,
            "UpfrontFee": fee,
            "CurrencyCode": "USD",
            "Tenancy": "default",
        }

    request = {
        "InstanceType": "p6-b200.48xlarge",
        "InstanceCount": 8,
        "CapacityDurationHours": 168,
        "StartDateRange": start,
        "EndDateRange": end,
    }
    stub = Stubber(ec2)
    stub.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [offering("cbr-0aaaaaaaaaaaaaaa1", "200000.00")], "NextToken": "t"},
        request,
    )
    stub.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [offering("cbr-0aaaaaaaaaaaaaaa2", "190000.50")]},
        {**request, "NextToken": "t"},
    )
    with stub:
        est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region), ec2=ec2)
    stub.assert_no_pending_responses()
    (fee,) = [i for i in est.items if i.kind == UPFRONT]
    assert fee.usd_each == 190000.5 and fee.source == LIVE_QUOTE_SOURCE and fee.name.endswith(", live quote")
    assert "charged at the rate when bought" in fee.assumption


def test_no_live_offering_leaves_the_block_fee_unknown_and_says_why(synth: Synth) -> None:
    cfg = load_config(ROOT / "examples" / "ec2-capacity-block.yaml")
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ec2)
    stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": []})
    with stub:
        est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region), ec2=ec2)
    (fee,) = [i for i in est.items if i.kind == UPFRONT]
    assert fee.usd_each is None and "no Capacity Block offering for this window now" in fee.source


def test_every_table_price_has_a_source_and_a_date() -> None:
    from datetime import date

    import yaml

    from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION
    from fminfra.ops.pricing import PRICES_FILE

    data = yaml.safe_load(PRICES_FILE.read_text(encoding="utf-8"))
    rows = data["prices"]
    keys = [(r["key"], r["region"]) for r in rows]
    assert len(keys) == len(set(keys)), "one price per key and region"
    for r in rows:
        assert r["usd"] > 0 and r["unit"] in ("hour", "GB-month", "user-month", "10M samples", "IOPS-month"), r
        assert r["region"] in AZ_ID_PREFIX_BY_REGION and str(r["source"]).strip(), r
        assert isinstance(r["checked"], date), r
    # An entry with no price recorded says what was searched, and when.
    for u in data["unsourced"]:
        assert str(u["searched"]).strip() and isinstance(u["checked"], date), u
        assert all(region in AZ_ID_PREFIX_BY_REGION and (u["key"], region) not in keys for region in u["regions"]), u


def test_a_regional_instance_price_is_for_a_region_the_catalog_sells_the_type_in() -> None:
    from fminfra.core.regional import regions_offering_ec2

    instance_keys = ("ec2:", "capacity-block:")
    wrong = [
        (key, region)
        for key, region in table()
        if key.startswith(instance_keys) and region not in regions_offering_ec2(key.split(":", 1)[1])
    ]
    assert wrong == []
    # and the check bites: eu-west-1 sells no p5en (fminfra/core/ec2_regional.json)
    assert "eu-west-1" not in regions_offering_ec2("p5en.48xlarge")


def _unpriced(est: Estimate) -> list[str]:
    """The lines that have neither a price nor a recorded missing source (prices.yaml's `unsourced`)."""
    return [
        f"{i.name}: {i.source}"
        for i in est.unknown
        if not (
            (i.key is not None and (i.key, est.region) in unsourced() and "no public source recorded for" in i.source)
            or (i.key is None and i.source == TRAINING_PLAN_FEE_UNKNOWN)
        )
    ]


@pytest.mark.parametrize("path", [*SHIPPED_CONFIGS, *EXAMPLE_CONFIGS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_line_of_a_shipped_config_is_priced_or_names_the_source_it_lacks(synth: Synth, path: Any) -> None:
    """Issue 36: before, the P types, g6e and the block fee were unknown with no source named."""
    cfg = load_config(path)
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    assert _unpriced(est) == []
    # the GPU groups on EC2 On-Demand are priced wherever the shipped files use them
    # (the catalog's GPU types; an EKS system node type without a public price is in prices.yaml's `unsourced`)
    gpu_keys = {f"{kind}:{name}" for name in catalog.CATALOG for kind in ("ec2", "capacity-block")}
    assert all(i.usd_each is not None for i in est.items if i.key in gpu_keys)


def test_a_removed_price_fails_the_coverage_check(synth: Synth, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the test: drop the ODCR example's p5.48xlarge price and its line is reported."""
    from fminfra.ops import pricing

    cfg = load_config(ROOT / "examples" / "ec2-odcr.yaml")
    assert _unpriced(estimate(cfg, synth.outdir, book=PriceBook(cfg.region))) == []
    kept = {k: v for k, v in table().items() if k != ("ec2:p5.48xlarge", "us-east-2")}
    monkeypatch.setattr(pricing, "table", lambda: kept)
    (line,) = _unpriced(estimate(cfg, synth.outdir, book=PriceBook(cfg.region)))
    assert line.startswith("ODCR for trainers: 4 x p5.48xlarge: price unknown: no public source recorded for the EC2 On-Demand")


def test_staging_network_and_eks_control_plane_are_priced_in_us_west_2(synth: Synth) -> None:
    """Before: staging's NAT gateway, interface endpoints and EKS control plane were "price unknown"
    (no us-west-2 source; docs/facts/pricing.md#us-west-2-network-eks)."""
    from datetime import date

    cfg = load_config(ROOT / "config" / "staging.yaml")
    # staging's Kubernetes 1.34 is in standard support until 2026-12-02 (then the extended rate, tested below)
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region), today=date(2026, 12, 1))
    fixed = {i.key: i for i in est.items if i.kind == FIXED}
    nat, endpoints, eks = fixed["nat-gateway"], fixed["vpc-interface-endpoint"], fixed["eks-cluster:standard"]
    assert nat.per_hour == pytest.approx(nat.quantity * 0.045)
    assert endpoints.per_hour == pytest.approx(endpoints.quantity * 0.01) and endpoints.quantity > 0
    assert eks.per_month == pytest.approx(0.10 * HOURS_PER_MONTH)
    assert all("hsr87/sample-agentic-rl-sandboxes-on-sagemaker-hyperpod" in i.source for i in (nat, endpoints, eks))
    # the extended-support rate is recorded for the same region
    assert _price("eks-cluster:extended", "us-west-2") == 0.60


def test_an_interface_endpoint_is_priced_in_us_east_1_and_unknown_in_us_east_2(synth: Synth) -> None:
    """prod (us-east-1) prices its endpoints per endpoint-AZ; the ODCR example (us-east-2) still names the
    source it lacks, and which regions the table has."""
    prod = load_config(ROOT / "config" / "prod.yaml")
    (endpoints,) = [i for i in estimate(prod, synth.outdir, book=PriceBook(prod.region)).items if i.key == "vpc-interface-endpoint"]
    assert endpoints.per_month == pytest.approx(endpoints.quantity * 0.01 * HOURS_PER_MONTH)
    odcr = load_config(ROOT / "examples" / "ec2-odcr.yaml")
    (unknown,) = [i for i in estimate(odcr, synth.outdir, book=PriceBook(odcr.region)).items if i.key == "vpc-interface-endpoint"]
    assert unknown.usd_each is None
    assert "no public source recorded for the interface VPC endpoint rate per AZ-hour in us-east-2" in unknown.source
    assert "USE2-VpcEndpoint-Hours" in unknown.source


def test_grafana_users_are_priced_where_a_source_names_the_region() -> None:
    """Grafana's editor and viewer rates have sources for us-east-1, us-west-2 and eu-west-1
    (docs/facts/pricing.md#helios-price-list-2026-09); elsewhere the line says where the table has them."""
    for region in ("us-east-1", "us-west-2", "eu-west-1"):
        assert (_price("grafana:editor", region), _price("grafana:viewer", region)) == (9.0, 5.0)
    assert PriceBook("us-east-2").get("grafana:editor") is None
    assert "has grafana:editor only for eu-west-1, us-east-1, us-west-2" in PriceBook("us-east-2").missing("grafana:editor")


def test_amp_ingestion_is_priced_per_10m_samples_and_unknown_in_us_east_2(synth: Synth) -> None:
    """Before: AMP ingestion was "price unknown" in every shipped config; now dev, staging and prod price it
    (us-west-2, us-east-1) and the us-east-2 example still names the source it lacks."""
    for path in (ROOT / "config" / "staging.yaml", ROOT / "config" / "prod.yaml"):
        cfg = load_config(path)
        (amp,) = [i for i in estimate(cfg, synth.outdir, book=PriceBook(cfg.region)).items if i.key == "amp:ingestion"]
        # the first 2 billion samples of the month (200 x 10M) at $0.90 per 10M; the rest is the next tier's line
        assert amp.quantity == 200 and amp.per_month == pytest.approx(200 * 0.90)
        assert "billynorris/helios" in amp.source
    odcr = load_config(ROOT / "examples" / "ec2-odcr.yaml")
    (unknown,) = [i for i in estimate(odcr, synth.outdir, book=PriceBook(odcr.region)).items if i.key == "amp:ingestion"]
    assert unknown.usd_each is None and "AMP sample ingestion rate in us-east-2 (searched: " in unknown.source


def test_a_per_gpu_hour_figure_says_the_up_front_fee_is_not_in_it(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    """The Capacity Block example is fully priced now: its per-GPU-hour figure is the hourly cost only
    (the block's fee is paid up front), and the line says so rather than read as the block's GPU-hour rate."""
    from fminfra.ops.cost import render

    cfg = load_config(ROOT / "examples" / "ec2-capacity-block.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    assert [i.key for i in est.unknown] == ["ebs:gp3"]  # the root volumes: no sourced rate
    out = render(dataclasses.replace(est, items=[i for i in est.items if i not in est.unknown]))
    # every GPU is the block's: no per-GPU-hour figure from the hourly total without the block's fee
    assert "per GPU-hour" not in out and "paid up front: $" in out
    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    out = render(dataclasses.replace(est, items=[i for i in est.items if i not in est.unknown]))
    assert "(16 GPUs; the 32 GPUs of Capacity Blocks and training plans are left out: their fees are paid up front)" in out


def test_an_auto_scaling_group_belongs_to_its_own_group_not_a_prefix_of_it() -> None:
    from fminfra.core.assembly import auto_scaling_group_name

    assert auto_scaling_group_name("AutoScalingGroupreservedoneGroup0A489F60", ["reserved", "reserved-one"]) == "reserved-one"
    assert auto_scaling_group_name("AutoScalingGroupreservedGroupF2687C1D", ["reserved", "reserved-one"]) == "reserved"


def test_an_eks_group_in_an_odcr_runs_at_zero_beside_the_reservation(synth: Synth) -> None:
    """Before: the node group was priced On-Demand and its ODCR as reserved, so the reservation was counted twice."""
    cfg = load_config(ROOT / "tests" / "configs" / "capacity-ec2.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    g6e = _price("ec2:g6e.12xlarge", "us-west-2")
    (odcr,) = [i for i in est.items if i.name == "ODCR for serve: 2 x g6e.12xlarge"]
    assert odcr.kind == RESERVED and odcr.per_hour == pytest.approx(2 * g6e)
    (group,) = [i for i in est.items if i.name.startswith("fminfra-cap-ec2-serve:")]
    assert group.name == "fminfra-cap-ec2-serve: 2 x g6e.12xlarge (EKS, odcr)"
    assert group.kind == RUNNING and group.per_hour == 0 and group.source == "billed by its reservation"
    assert [i.name for i in est.items if i.key == "ec2:g6e.12xlarge"] == ["ODCR for serve: 2 x g6e.12xlarge"]


def test_eks_groups_on_existing_reservations_and_a_capacity_block_run_at_zero(synth: Synth) -> None:
    """Before: both inference groups of capacity-eks were priced On-Demand (the reservations and the block pay)."""
    cfg = load_config(ROOT / "tests" / "configs" / "capacity-eks.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    p4de = _price("ec2:p4de.24xlarge", "us-east-1")
    groups = {i.name: i for i in est.items if i.name.startswith("fminfra-cap-eks-serve")}
    assert set(groups) == {
        "fminfra-cap-eks-serve-reserved: 2 x p4de.24xlarge (EKS, reservation)",
        "fminfra-cap-eks-serve-block: 1 x p5en.48xlarge (EKS, capacity-block)",
    }
    assert all(i.kind == RUNNING and i.per_hour == 0 for i in groups.values())
    (existing,) = [i for i in est.items if i.kind == RESERVED]
    assert existing.name == "reservations for serve-reserved: 2 x p4de.24xlarge (existing)"
    assert existing.per_hour == pytest.approx(2 * p4de) and existing.assumption == EXISTING_RESERVATION_ASSUMPTION
    # the existing reservation's GPUs are in the hourly total; the training plan's and the block's are prepaid
    assert est.gpus == 2 * 8 and est.prepaid_gpus == 4 * 8 + 1 * 8


def test_an_eks_capacity_block_pays_its_fee_up_front(synth: Synth) -> None:
    """Before: only training groups' blocks had a fee line; the inference group's block cost nothing, and an
    assumption said its desired size 0 at the maximum 1 costs 1/1x."""
    cfg = load_config(ROOT / "tests" / "configs" / "capacity-eks.yaml")
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    fees = {i.name: i for i in est.items if i.kind == UPFRONT}
    block = fees["serve-block: capacity-block fee, 168 h window (1 x 168 instance-hours, indicative)"]
    rate = _price("capacity-block:p5en.48xlarge", "us-east-1")
    assert block.key == "capacity-block:p5en.48xlarge" and block.quantity * (block.usd_each or 0) == pytest.approx(168 * rate)
    assert est.upfront == pytest.approx(168 * rate)  # the training plan's fee is unknown
    assert not [i.assumption for i in est.items if i.assumption.startswith("desired size 0")]


def _baseline(synth: Synth, env: str, folder: Any, edit: Any) -> None:
    """Write ENV's synthesized templates, changed by EDIT(resource type, properties), as a baseline folder."""
    from fminfra.ops.guard import read_templates, write_baseline

    templates = read_templates(synth.outdir, env)
    for template in templates.values():
        for res in template.get("Resources", {}).values():
            edit(res["Type"], res.get("Properties") or {})
    write_baseline(templates, folder)


def test_the_baseline_is_priced_from_its_own_templates(synth: Synth, tmp_path: Any) -> None:
    """Before: the baseline's ec2 group count came from the current config, so a pull request that grows the
    on-demand group showed the same cost before and after."""

    def shrink(kind: str, props: dict[str, Any]) -> None:
        if kind == "AWS::AutoScaling::AutoScalingGroup" and props.get("MaxSize") == "2" and props.get("MinSize") == "2":
            props.update(MinSize="1", MaxSize="1", DesiredCapacity="1")  # the on-demand group of 2

    _baseline(synth, "cap-ec2", tmp_path, shrink)
    cfg = load_config(ROOT / "tests" / "configs" / "capacity-ec2.yaml")
    before = estimate(cfg, tmp_path, book=PriceBook(cfg.region), baseline=True)
    assert [i.name for i in before.items if i.key == "ec2:p4d.24xlarge"] == ["ondemand: 1 x p4d.24xlarge (ec2)"]


def test_a_baseline_block_fee_counts_the_baselines_instances_and_says_its_window_is_assumed(
    synth: Synth, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the baseline's Capacity Block fee came from the current config's count; a pull request that
    doubles the block showed the same fee before and after, and nothing said the window was the config's."""

    def halve(kind: str, props: dict[str, Any]) -> None:
        if kind == "AWS::AutoScaling::AutoScalingGroup":
            props["MaxSize"] = "4"

    _baseline(synth, "ec2-cb", tmp_path, halve)
    config = str(ROOT / "examples" / "ec2-capacity-block.yaml")
    assert main(["cost", config, "--outdir", str(synth.outdir), "--baseline", str(tmp_path), "--markdown"]) == 0
    out = capsys.readouterr().out
    rate = _price("capacity-block:p6-b200.48xlarge", "us-west-2")
    assert f"| paid up front | ${4 * 168 * rate:,.2f} | ${8 * 168 * rate:,.2f} |" in out
    # the window is the baseline's own (its scheduled actions) and the config sets no fee: nothing is assumed
    assert "assumed equal to the current config's" not in out and "in no template" not in out


def test_a_stale_assembly_says_the_templates_and_the_config_disagree(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a cdk.out synthesized for another region or other counts was priced with the config's region
    and counts mixed in, and nothing said so."""
    from fminfra.ops.cost import disagreements

    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    stale = cfg.model_copy(
        update={
            "region": "us-west-2",
            "compute": cfg.compute.model_copy(
                update={
                    "instance_groups": [g.model_copy(update={"count": 3}) if g.name == "block" else g for g in cfg.compute.instance_groups]
                }
            ),
        }
    )
    from fminfra.ops.cost import stacks_of

    assert disagreements(stale, stacks_of(stale, synth.outdir)) == [
        "the templates and the config disagree: region us-east-2 in the templates, us-west-2 in the config (synthesize again)",
        "the templates and the config disagree: group block count 4 in the templates, 3 in the config (synthesize again)",
    ]
    assert disagreements(cfg, stacks_of(cfg, synth.outdir)) == []


@pytest.mark.parametrize("name", ["cap-eks", "cap-ec2", "staging", "prod", "dev", "hp-slurm-inf"])
def test_a_fresh_assembly_agrees_with_its_config(synth: Synth, name: str) -> None:
    from fminfra.ops.cost import disagreements, stacks_of

    cfg = synth.configs[name]
    assert disagreements(cfg, stacks_of(cfg, synth.outdir)) == []


def test_an_eks_control_plane_past_standard_support_bills_the_extended_rate(synth: Synth) -> None:
    """Before: every control plane was priced at the standard rate, even on a version past its standard support
    (cap-eks: Kubernetes 1.34, standard support until 2026-12-02; upgrade policy: the default, EXTENDED)."""
    from datetime import date

    cfg = load_config(ROOT / "tests" / "configs" / "capacity-eks.yaml")

    def plane(today: date) -> Any:
        (item,) = [
            i for i in estimate(cfg, synth.outdir, book=PriceBook(cfg.region), today=today).items if i.name.startswith("EKS control")
        ]
        return item

    before, after = plane(date(2026, 12, 1)), plane(date(2026, 12, 2))
    assert before.key == "eks-cluster:standard" and before.per_hour == pytest.approx(_price("eks-cluster:standard", "us-east-1"))
    assert "standard support until 2026-12-02" in before.assumption
    assert after.key == "eks-cluster:extended" and after.per_hour == pytest.approx(_price("eks-cluster:extended", "us-east-1"))
    assert "past its EKS standard support (ended 2026-12-02)" in after.assumption


def test_amp_ingestion_counts_the_hours_per_month_asked_for(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: AMP ingestion was counted for 730 hours whatever --hours-per-month said."""
    assert main(["cost", "staging", "--outdir", str(synth.outdir), "--hours-per-month", "100", "--json"]) == 0
    amp = [i for i in json.loads(capsys.readouterr().out)["items"] if (i["key"] or "").startswith("amp:ingestion")]
    assert sum(i["quantity"] for i in amp) == pytest.approx(10_000 * 3600 * 100 / 1e7)


def test_a_unit_price_is_money_with_two_decimals(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `%.4g` printed the block's fee as "$4.2e+04/window" and NAT as "$0.045/hour" beside "$9/user-month"."""
    assert main(["cost", str(ROOT / "tests" / "configs" / "cost-ec2.yaml"), "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    assert "$42,000.50/window" in out and "e+" not in out
    p5en = _price("ec2:p5en.48xlarge", "us-east-2")
    assert f"${p5en:,.2f}/instance-hour" in out and "$0.045/hour" in out  # a rate below a dollar keeps its digits
    assert main(["cost", str(ROOT / "tests" / "configs" / "obs-grafana.yaml"), "--outdir", str(synth.outdir)]) == 0
    assert "$9.00/user-month" in capsys.readouterr().out


def test_no_grafana_viewers_cost_nothing_where_the_rate_is_unknown(synth: Synth) -> None:
    """Before: "Grafana viewers (0)" was "price unknown" (and counted as an unknown item) in a region without a rate."""
    cfg = load_config(ROOT / "tests" / "configs" / "obs-grafana.yaml")
    elsewhere = cfg.model_copy(update={"region": "us-east-2"})  # no Grafana rate recorded there
    est = estimate(elsewhere, synth.outdir, book=PriceBook("us-east-2"))
    items = {i.name: i for i in est.items}
    viewers, editors = items["Grafana viewers (0)"], items["Grafana editors (1)"]
    assert viewers.per_month == 0 and viewers not in est.unknown
    assert editors.per_month is None and editors in est.unknown


# ------------------------------------------------------------------------------------------ Karpenter pools


def _karpenter_estimate(synth: Synth, cfg: Any = None) -> Estimate:
    cfg = cfg or synth.configs["eks-karp"]
    return estimate(cfg, synth.outdir, book=PriceBook(cfg.region))


def test_a_karpenter_pool_runs_0_to_its_limit_at_the_on_demand_rate(synth: Synth) -> None:
    """Before: a Karpenter pool creates no node group, so nothing priced it (serve-g6e cost $0 at any size)."""
    from fminfra.ops.cost import KARPENTER_POOL_ASSUMPTION, KARPENTER_SPOT_ASSUMPTION

    est = _karpenter_estimate(synth)
    g6e = _price("ec2:g6e.12xlarge", "us-west-2")
    (pool,) = [i for i in est.items if i.name.startswith("serve-g6e:")]
    assert pool.name == "serve-g6e: running 0 to 4 x g6e.12xlarge (Karpenter pool, on-demand/spot; figures at max 4)"
    assert (pool.kind, pool.quantity, pool.key, pool.gpus, pool.karpenter_pool) == (RUNNING, 4, "ec2:g6e.12xlarge", 16, True)
    assert pool.per_hour == pytest.approx(4 * g6e) and pool.per_month == pytest.approx(4 * g6e * HOURS_PER_MONTH)
    assert pool.assumption == f"{KARPENTER_POOL_ASSUMPTION}; {KARPENTER_SPOT_ASSUMPTION}"  # spot: the On-Demand rate is an upper bound
    # never billing while idle: the idle figure is the fixed items alone
    fixed = sum(i.per_month or 0 for i in est.items if i.kind in (RESERVED, FIXED))
    assert est.summary()["idle_per_month"] == pytest.approx(fixed, abs=0.01)


def _replace_strings(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_strings(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_strings(v, old, new) for k, v in value.items()}
    return value


def test_an_on_demand_pool_has_no_spot_assumption(synth: Synth) -> None:
    from fminfra.ops.cost import KARPENTER_POOL_ASSUMPTION, items_from_templates

    cfg = synth.configs["eks-karp"]
    stacks = [
        dataclasses.replace(s, template=_replace_strings(s.template, '"values":["on-demand","spot"]', '"values":["on-demand"]'))
        for s in synth.stacks["eks-karp"]
    ]
    items = items_from_templates(cfg, stacks, grafana_users=(1, 0), amp_samples=1.0)
    (pool,) = [i for i in items if i.name.startswith("serve-g6e:")]
    assert pool.name.endswith("(Karpenter pool, on-demand; figures at max 4)") and pool.assumption == KARPENTER_POOL_ASSUMPTION


def test_a_reserved_karpenter_pool_runs_at_zero_beside_its_block_fee(synth: Synth) -> None:
    est = _karpenter_estimate(synth)
    (pool,) = [i for i in est.items if i.name.startswith("serve-p5:") and i.kind == RUNNING]
    assert pool.name == "serve-p5: 2 x p5.48xlarge (Karpenter pool, running 0 to 2, capacity-block)"
    assert (pool.kind, pool.per_hour, pool.gpus, pool.source) == (RUNNING, 0, 16, "covered by the block's fee")
    (fee,) = [i for i in est.items if i.kind == UPFRONT]
    assert fee.name == "serve-p5: capacity-block fee"
    assert fee.source == "price unknown: set capacity.upfront_fee_usd (a Karpenter pool's block has no starts_at/ends_at)"


def test_a_karpenter_pool_on_an_existing_reservation_bills_it_while_idle(synth: Synth) -> None:
    from fminfra.config import parse_config, read_yaml

    data = read_yaml(ROOT / "tests" / "configs" / "eks-karpenter.yaml")
    data["compute"]["inference_node_groups"][1]["capacity"] = {"type": "reservation", "reservation_ids": ["cr-0123456789abcdef0"]}
    est = _karpenter_estimate(synth, parse_config(data, "f.yaml"))
    p5 = _price("ec2:p5.48xlarge", "us-west-2")
    (reserved,) = [i for i in est.items if i.kind == RESERVED]
    assert reserved.name == "reservations for serve-p5: 2 x p5.48xlarge (existing)" and reserved.per_hour == pytest.approx(2 * p5)
    (pool,) = [i for i in est.items if i.name.startswith("serve-p5:")]
    assert pool.per_hour == 0 and pool.source == "billed by its reservations"
    assert not [i for i in est.items if i.kind == UPFRONT]


def test_cost_says_a_karpenter_pool_is_free_while_idle_and_what_it_costs_at_max(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(ROOT / "tests" / "configs" / "eks-karpenter.yaml"), "--outdir", str(synth.outdir)]) == 0
    out = capsys.readouterr().out
    monthly = 4 * _price("ec2:g6e.12xlarge", "us-west-2") * HOURS_PER_MONTH
    assert (
        f"Karpenter pools (serve-g6e): $0 while idle; at their maximum ${monthly / HOURS_PER_MONTH:,.2f} an hour, ${monthly:,.2f} a month"
        in out
    )


def test_a_karpenter_pool_limit_that_is_not_the_configs_max_size_is_stale(synth: Synth) -> None:
    from fminfra.ops.cost import disagreements, stacks_of

    cfg = synth.configs["eks-karp"]
    assert disagreements(cfg, stacks_of(cfg, synth.outdir)) == []
    groups = [g.model_copy(update={"max_size": 5}) if g.name == "serve-g6e" else g for g in cfg.compute.inference_node_groups]
    stale = cfg.model_copy(update={"compute": cfg.compute.model_copy(update={"inference_node_groups": groups})})
    assert disagreements(stale, stacks_of(stale, synth.outdir)) == [
        "the templates and the config disagree: group serve-g6e max_size 4 in the templates, 5 in the config (synthesize again)"
    ]


def test_the_capacity_type_label_is_karpenter_pools_own() -> None:
    from fminfra.eks.constructs.karpenter_pools import CAPACITY_TYPE_LABEL as POOLS_LABEL
    from fminfra.ops import cost

    assert cost.KARPENTER_CAPACITY_TYPE_LABEL == POOLS_LABEL


def test_a_baseline_in_another_region_is_priced_at_that_regions_prices(
    synth: Synth, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a pull request that moves the environment priced "before" at the new region's rates and said
    nothing; the baseline's region is in its templates (the interface endpoints' service names)."""
    from fminfra.ops.guard import read_templates, write_baseline

    templates = read_templates(synth.outdir, "cost-ec2")
    moved = {n: json.loads(json.dumps(t).replace("com.amazonaws.us-east-2.", "com.amazonaws.us-west-2.")) for n, t in templates.items()}
    write_baseline(moved, tmp_path)
    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    before = estimate(cfg, tmp_path, book=PriceBook(cfg.region), baseline=True)
    assert before.region == "us-west-2"
    (endpoints,) = [i for i in before.items if i.key == "vpc-interface-endpoint"]
    assert endpoints.usd_each == _price("vpc-interface-endpoint", "us-west-2")  # unknown in us-east-2
    note = "before: the baseline's templates are in us-west-2 (their endpoint service names), the config in us-east-2: the baseline is priced at us-west-2's prices"
    assert note in before.notes
    config = str(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    assert main(["cost", config, "--outdir", str(synth.outdir), "--baseline", str(tmp_path), "--markdown"]) == 0
    assert f"- {note}" in capsys.readouterr().out


def test_a_baseline_block_window_is_read_from_its_scheduled_actions(
    synth: Synth, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the baseline's Capacity Block window was the current config's ("in no template"), so a pull request
    that lengthened the block showed the same fee before and after; the ec2 path's BlockStart action holds it."""

    def later(kind: str, props: dict[str, Any]) -> None:
        if kind == "AWS::AutoScaling::ScheduledAction" and props.get("StartTime") == "2027-01-10T11:30:00Z":
            props["StartTime"] = "2027-01-11T11:30:00Z"  # a block a day shorter

    _baseline(synth, "ec2-cb", tmp_path, later)
    config = str(ROOT / "examples" / "ec2-capacity-block.yaml")
    assert main(["cost", config, "--outdir", str(synth.outdir), "--baseline", str(tmp_path), "--markdown"]) == 0
    rate = _price("capacity-block:p6-b200.48xlarge", "us-west-2")
    assert f"| paid up front | ${8 * 144 * rate:,.2f} | ${8 * 168 * rate:,.2f} |" in capsys.readouterr().out


def test_a_stale_block_window_is_a_disagreement(synth: Synth) -> None:
    from fminfra.ops.cost import disagreements, stacks_of

    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    (block,) = [g for g in cfg.compute.instance_groups if g.name == "block"]
    starts = block.capacity.starts_at
    assert starts is not None and block.capacity.ends_at is not None
    moved = block.model_copy(
        update={
            "capacity": block.capacity.model_copy(update={"ends_at": block.capacity.ends_at.replace(day=block.capacity.ends_at.day + 1)})
        }
    )
    stale = cfg.model_copy(
        update={
            "compute": cfg.compute.model_copy(
                update={"instance_groups": [moved if g.name == "block" else g for g in cfg.compute.instance_groups]}
            )
        }
    )
    (line,) = disagreements(stale, stacks_of(stale, synth.outdir))
    assert line.startswith("the templates and the config disagree: group block Capacity Block window ")
    assert f"{starts:%Y-%m-%dT%H:%M:%SZ} to {block.capacity.ends_at:%Y-%m-%dT%H:%M:%SZ} in the templates" in line
    assert line.endswith("in the config (synthesize again)")


def test_unknown_up_front_fees_are_unknown_in_the_pr_summary_and_no_absent_fee_is_assumed(synth: Synth) -> None:
    """Before: the markdown said `paid up front $0.00` when every fee was unknown, and a baseline said a training
    plan fee the config does not set was "assumed equal to the current config's"."""
    from fminfra.ops.cost import markdown

    cfg = synth.configs["cap-eks"]
    after = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    before = estimate(cfg, synth.outdir, book=PriceBook(cfg.region), baseline=True)
    assert all(i.usd_each is None for i in after.items if i.kind == UPFRONT and "training-plan" in i.name)
    assert not any("training plan fee" in n for n in before.notes)
    cfg = synth.configs["cap-ec2"]
    after = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    assert [i.usd_each for i in after.items if i.kind == UPFRONT] == [None]
    assert "| paid up front | unknown | unknown |" in markdown(after, after)


@pytest.mark.parametrize("flag", ["--outdir", "--baseline"])
def test_another_environments_templates_are_refused(synth: Synth, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `cost dev --baseline baselines/prod` priced prod's templates as dev's "before" without a word."""
    prod = ROOT / "baselines" / "prod"
    args = ["cost", "dev", "--outdir", str(synth.outdir), flag, str(prod)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{prod}: (folder): ")
    assert "prod-Compute" in err and "not environment dev's (its stacks are named dev-*)" in err


@pytest.mark.parametrize(("per_second", "tiers"), [(10_000, (200, 2428, 0)), (100_000, (200, 25_000, 1080)), (500, (131.4, 0, 0))])
def test_amp_ingestion_is_priced_by_tier(synth: Synth, per_second: float, tiers: tuple[float, float, float]) -> None:
    """Before: every sample was priced at the first tier's $0.90 per 10M; the Price List (billynorris/helios) gives
    $0.90 for the first 2B samples a month, $0.35 for the next 250B and $0.16 above 252B
    (docs/facts/pricing.md#amp-ingestion-tiers)."""
    cfg = synth.configs["staging"]
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region), amp_samples=per_second)
    lines = {i.key: i for i in est.items if (i.key or "").startswith("amp:ingestion")}
    keys = ("amp:ingestion", "amp:ingestion:next-250b", "amp:ingestion:over-252b")
    assert {k: lines[k].quantity for k in keys if k in lines} == {k: pytest.approx(q) for k, q in zip(keys, tiers, strict=True) if q}
    month = sum(i.per_month or 0 for i in lines.values())
    assert month == pytest.approx(tiers[0] * 0.90 + tiers[1] * 0.35 + tiers[2] * 0.16)


def test_billable_storage_and_the_managed_scraper_are_lines(synth: Synth) -> None:
    """Before: the AMP managed scraper, launch templates' EBS volumes and HyperPod's instance storage were neither
    priced nor listed as "price unknown"."""
    staging = synth.configs["staging"]
    est = estimate(staging, synth.outdir, book=PriceBook(staging.region))
    (hours,) = [i for i in est.items if i.key == "amp:scraper"]
    assert hours.per_hour == pytest.approx(0.04) and "billynorris/helios" in hours.source
    (collected,) = [i for i in est.items if i.key == "amp:scraper-samples"]
    assert collected.quantity == pytest.approx(10_000 * 3600 * HOURS_PER_MONTH / 1e7)
    assert collected.per_month == pytest.approx(collected.quantity * 0.03)
    dev = synth.configs["dev"]
    storage = {i.name: i for i in estimate(dev, synth.outdir, book=PriceBook(dev.region)).items if i.key == "hyperpod-ebs"}
    assert storage["instance storage of workers: 2 x 500 GiB (HyperPod)"].quantity == 1000
    assert all(i.source.startswith("price unknown: no public source recorded") and "searched: " in i.source for i in storage.values())
    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    volumes = [i for i in estimate(cfg, synth.outdir, book=PriceBook(cfg.region)).items if i.key == "ebs:gp3"]
    assert volumes and all(i.unit == "GB-month" and i.quantity > 0 and i.source.startswith("price unknown") for i in volumes)


def test_an_odcr_line_names_the_group_with_its_hyphens() -> None:
    """Before: the ODCR line took the group's name from the logical id, which drops hyphens ("reservedone")."""
    from pathlib import Path

    from fminfra.core.assembly import StackTemplate
    from fminfra.ops.cost import items_from_templates

    cfg = load_config(ROOT / "tests" / "configs" / "cost-ec2.yaml")
    groups = [g.model_copy(update={"name": "reserved-one"}) if g.name == "reserved" else g for g in cfg.compute.instance_groups]
    cfg = cfg.model_copy(update={"compute": cfg.compute.model_copy(update={"instance_groups": groups})})
    resource = {"Type": "AWS::EC2::CapacityReservation", "Properties": {"InstanceType": "p5en.48xlarge", "InstanceCount": 2}}
    template = {"Resources": {"CapacityReservationreservedoneReservation0A1B2C3D": resource}}
    stack = StackTemplate(cfg.name, "cost-ec2-Compute", "cost-ec2-Compute", Path("x.template.json"), template)
    items = items_from_templates(cfg, [stack], grafana_users=(1, 0), amp_samples=0)
    assert [i.name for i in items if i.kind == RESERVED] == ["ODCR for reserved-one: 2 x p5en.48xlarge"]


def test_a_stale_eks_block_start_is_a_disagreement(synth: Synth) -> None:
    """The EKS group's template holds its block's start (the EventBridge Scheduler schedule's at(...)): a cdk.out
    with another start than the config's is reported."""
    from datetime import timedelta

    from fminfra.ops.cost import disagreements, stacks_of

    cfg = synth.configs["cap-eks"]
    assert disagreements(cfg, stacks_of(cfg, synth.outdir)) == []
    (block,) = [g for g in cfg.compute.inference_node_groups if g.name == "serve-block"]
    cap = block.capacity
    assert cap.starts_at is not None and cap.ends_at is not None
    moved = block.model_copy(update={"capacity": cap.model_copy(update={"starts_at": cap.starts_at + timedelta(days=1)})})
    stale = cfg.model_copy(
        update={
            "compute": cfg.compute.model_copy(
                update={"inference_node_groups": [moved if g.name == "serve-block" else g for g in cfg.compute.inference_node_groups]}
            )
        }
    )
    assert disagreements(stale, stacks_of(stale, synth.outdir)) == [
        f"the templates and the config disagree: group serve-block Capacity Block start {cap.starts_at:%Y-%m-%dT%H:%M:%SZ} in the templates, "
        f"{cap.starts_at + timedelta(days=1):%Y-%m-%dT%H:%M:%SZ} in the config (synthesize again)"
    ]


def test_hyperpod_autoscaling_nodepool_is_not_a_karpenter_pool(synth: Synth) -> None:
    """HyperPod's managed autoscaling applies a NodePool on a HyperpodNodeClass: it scales HyperPod instance
    groups, which their HyperPod lines price; it was listed as a Karpenter pool of unknown type and price."""
    cfg = synth.configs["hp-as"]
    est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
    assert not [i for i in est.items if "Karpenter pool" in i.name]
    assert [i.name for i in est.items if i.name.startswith("burst:")] == ["burst: 0 x ml.p5.48xlarge (HyperPod)"]


def test_a_node_group_without_a_launch_template_lists_its_root_volumes(synth: Synth) -> None:
    """Newcomer read r6, C: a managed node group without a launch template (staging's serve, the system
    nodes) had no EBS line, so a total could look exact (docs/facts/pricing.md#eks-node-group-default-disk)."""
    for env in ("staging", "eks-inf"):
        cfg = synth.configs[env]
        est = estimate(cfg, synth.outdir, book=PriceBook(cfg.region))
        volumes = [i for i in est.items if i.name.startswith("EBS root volumes of")]
        assert volumes and all(i.key == "ebs:eks-default" and i.unit == "GB-month" for i in volumes), (env, [i.name for i in est.items])
