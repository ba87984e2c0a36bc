"""The cost model's arithmetic, checked against figures computed by hand, and every input it refuses.

The fixture is small on purpose: two queues (one FIFO), one job type on each, round prices, and
1,000,000 jobs a month, so each expected figure below can be followed with a pencil.
"""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from conveyor.contract.declarations import Queue
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.topology import Topology
from conveyor.ops.cost import (
    Assumptions,
    CostInputError,
    Profile,
    UnknownJobTypeError,
    alarm_metrics,
    custom_metrics,
    estimate,
    load_profile,
    observed_workload,
    parse_mix,
    render_estimate,
    workload,
)
from conveyor.ops.price_table import CostDataError, Meter, PriceTable, Service, load_prices
from conveyor.ops.rate import SECONDS_PER_MONTH, parse_rate
from conveyor.ops.stats import JobStats
from conveyor.sdk.jobs import job
from functions.topology import TOPOLOGY

GIB = 2**30
MONTH_HOURS = 730


class Empty(Payload):
    pass


@job("alpha", queue="std", model=Empty)
def alpha(payload: Empty, ctx: JobContext) -> None:
    pass


@job("beta", queue="ordered", model=Empty)
def beta(payload: Empty, ctx: JobContext) -> None:
    pass


SMALL = Topology(
    queues=(
        Queue("std", age_objective=timedelta(minutes=1), memory_mb=1024),
        Queue("ordered", age_objective=timedelta(minutes=1), memory_mb=512, fifo=True),
    ),
    job_types=(alpha, beta),
)

PROFILE: dict[str, Any] = {
    "measured_at": "2026-12-01T12:00:00+00:00",
    "job_profiles": {
        "alpha": {
            "queue": "std",
            "requests_per_job": {
                "sqs.SendMessageBatch": 0.1,
                "sqs.ReceiveMessage": 0.2,
                "sqs.DeleteMessageBatch": 0.1,
                "dynamodb.PutItem": 1.0,
                "dynamodb.UpdateItem": 1.0,
                "dynamodb.GetItem": 2.0,
                "dynamodbstreams.GetRecords": 0.5,
                "dynamodbstreams.DescribeStream": 0.1,
                "cloudwatch.PutMetricData": 0.3,
            },
            "invocations_per_job": 0.1,
            "duration_ms_per_job": 100.0,
            "log_bytes_per_job": 1000.0,
            "metric_values_per_job": 4.0,
        },
        "beta": {
            "queue": "ordered",
            "requests_per_job": {
                "sqs.SendMessage": 1.0,
                "sqs.ReceiveMessage": 1.0,
                "sqs.DeleteMessage": 1.0,
                "dynamodb.TransactWriteItems": 1.0,
            },
            "invocations_per_job": 1.0,
            "duration_ms_per_job": 50.0,
            "log_bytes_per_job": 500.0,
            "metric_values_per_job": 4.0,
        },
    },
    "measured_by": "a field the model does not read",
}


def flat(usd: float, per: int = 1) -> dict[str, Any]:
    return {"unit": "unit", "per": per, "usd": usd, "url": "https://aws.amazon.com/pricing/"}


PRICES: dict[str, Any] = {
    "region": "test-1",
    "as_of": "2026-12-01",
    "currency": "USD",
    "prices": {
        "lambda_requests": flat(1.0, 1_000_000),
        "lambda_arm64_gb_seconds": flat(0.00001),
        "sqs_standard_requests": flat(1.0, 1_000_000),
        "sqs_fifo_requests": flat(2.0, 1_000_000),
        "dynamodb_write_request_units": flat(1.0, 1_000_000),
        "dynamodb_read_request_units": flat(0.5, 1_000_000),
        "dynamodb_streams_reads_by_lambda": flat(0.0, 100_000),
        "dynamodb_storage": flat(1.0),
        "dynamodb_point_in_time_recovery": flat(0.5),
        "cloudwatch_custom_metrics": flat(0.3),
        "cloudwatch_alarm_metrics": flat(0.1),
        "cloudwatch_lambda_logs_ingestion": flat(0.5),
        "cloudwatch_logs_storage": flat(0.03),
        "xray_traces_recorded": flat(5.0, 1_000_000),
        "xray_traces_scanned": flat(0.5, 1_000_000),
    },
}

# 1,000,000 jobs a month: 750,000 alpha and 250,000 beta.
MIX = {"alpha": 0.75, "beta": 0.25}
ALPHA_JOBS, BETA_JOBS = 750_000, 250_000


def profile(document: dict[str, Any] | None = None) -> Profile:
    return Profile.model_validate(document or PROFILE)


def prices(document: dict[str, Any] | None = None) -> PriceTable:
    return PriceTable.model_validate(document or PRICES)


def month(rate: str = "1e6/month", assumptions: Assumptions | None = None) -> Any:
    return estimate(workload(parse_rate(rate), MIX, SMALL), profile(), SMALL, prices(), assumptions)


def test_each_job_types_requests_and_dollars_match_the_hand_computed_figures() -> None:
    found = month()
    alpha_line, beta_line = found.lines
    assert alpha_line.jobs == pytest.approx(ALPHA_JOBS)

    # SQS: 0.1 + 0.2 + 0.1 requests a job (1 KiB messages: at most 10 to a batch, one 64 KB chunk).
    assert alpha_line.usage[Meter.SQS_STANDARD_REQUESTS] == pytest.approx(0.4 * ALPHA_JOBS)
    assert alpha_line.usd[Service.SQS] == pytest.approx(0.30)
    # FIFO: 3 requests a job at $2 per million.
    assert beta_line.usage[Meter.SQS_FIFO_REQUESTS] == pytest.approx(3 * BETA_JOBS)
    assert beta_line.usd[Service.SQS] == pytest.approx(1.50)

    # DynamoDB: a put and an update (2 WRU), two reads (2 RRU); the stream reads are Lambda's, free.
    assert alpha_line.usage[Meter.DYNAMODB_WRITE_UNITS] == pytest.approx(2 * ALPHA_JOBS)
    assert alpha_line.usage[Meter.DYNAMODB_READ_UNITS] == pytest.approx(2 * ALPHA_JOBS)
    assert alpha_line.usage[Meter.DYNAMODB_STREAM_READS] == pytest.approx(0.5 * ALPHA_JOBS)
    # One transaction of 2 items, 2 WRU each.
    assert beta_line.usage[Meter.DYNAMODB_WRITE_UNITS] == pytest.approx(4 * BETA_JOBS)
    # Idempotency records live 24 h of retries + 14 days of DLQ: 360 of the month's 730 hours' jobs, 1 KiB each.
    alpha_gb = ALPHA_JOBS * 360 / MONTH_HOURS * 1024 / GIB
    assert alpha_line.usage[Meter.DYNAMODB_STORAGE_GB] == pytest.approx(alpha_gb)
    assert alpha_line.usd[Service.DYNAMODB] == pytest.approx(1.50 + 0.75 + alpha_gb * 1.5)
    beta_gb = BETA_JOBS * 360 / MONTH_HOURS * 1024 / GIB
    assert beta_line.usd[Service.DYNAMODB] == pytest.approx(1.00 + beta_gb * 1.5)

    # Lambda: 75,000 invocations; 0.1 s at 1 GB a job.
    assert alpha_line.usd[Service.LAMBDA] == pytest.approx(0.075 + 75_000 * 0.00001)
    # 250,000 invocations; 0.05 s at 0.5 GB a job.
    assert beta_line.usd[Service.LAMBDA] == pytest.approx(0.25 + 6_250 * 0.00001)

    # Logs: 1,000 bytes a job and 360 bytes of Lambda's own lines per invocation, kept 30 of 30.42 days.
    alpha_log_gb = (1000 + 0.1 * 360) * ALPHA_JOBS / GIB
    assert alpha_line.usage[Meter.LOG_GB_INGESTED] == pytest.approx(alpha_log_gb)
    assert alpha_line.usd[Service.CLOUDWATCH] == pytest.approx(alpha_log_gb * (0.5 + 0.03 * 30 / (MONTH_HOURS / 24)))

    # X-Ray: under 1 invocation a second per function, so every invocation is traced, and scanned once.
    assert alpha_line.usage[Meter.TRACES_RECORDED] == pytest.approx(75_000)
    assert alpha_line.usd[Service.XRAY] == pytest.approx(75_000 * 5.5 / 1_000_000)
    assert beta_line.usd[Service.XRAY] == pytest.approx(250_000 * 5.5 / 1_000_000)


def test_the_total_is_the_lines_plus_the_fixed_alarms_and_metrics() -> None:
    found = month()
    # 2 job types x 4 success metrics + the outbox relay's 4; 2 queues x 5 + 2 job types x 6 + relay + relay DLQ.
    assert found.fixed.usage == {Meter.CUSTOM_METRICS: 12, Meter.ALARM_METRICS: 24}
    assert found.fixed.total == pytest.approx(12 * 0.3 + 24 * 0.1)
    assert found.total == pytest.approx(sum(line.total for line in found.lines) + found.fixed.total)
    assert found.per_million_jobs == pytest.approx(found.total)
    assert found.jobs == pytest.approx(1_000_000)


def test_sqs_bills_every_64_kb_of_a_batch_as_a_request() -> None:
    alpha_line = month(assumptions=Assumptions(message_bytes=16 * 1024)).lines[0]
    # A batch of 10 x 16 KiB is 3 chunks; a receive of 5 (0.2 a job) x 16 KiB is 2; a delete carries no body.
    assert alpha_line.usage[Meter.SQS_STANDARD_REQUESTS] == pytest.approx((0.3 + 0.4 + 0.1) * ALPHA_JOBS)


def test_xray_records_one_invocation_a_second_per_function_and_5_percent_of_the_rest() -> None:
    found = month("1000/s")
    alpha_line, beta_line = found.lines
    # alpha: 75 invocations a second; beta: 250 a second, on another function.
    assert alpha_line.usage[Meter.TRACES_RECORDED] == pytest.approx((1 + 0.05 * 74) * SECONDS_PER_MONTH)
    assert beta_line.usage[Meter.TRACES_RECORDED] == pytest.approx((1 + 0.05 * 249) * SECONDS_PER_MONTH)


def test_a_tiered_price_charges_each_tier_and_shares_the_charge_pro_rata() -> None:
    tiered = json.loads(json.dumps(PRICES))
    tiered["prices"]["lambda_requests"] = {
        "unit": "request",
        "per": 1,
        "tiers": [{"up_to": 100_000, "usd": 1e-6}, {"up_to": 200_000, "usd": 5e-7}, {"usd": 1e-7}],
        "url": "https://aws.amazon.com/lambda/pricing/",
    }
    table = prices(tiered)
    charge = table.prices[Meter.LAMBDA_REQUESTS].cost
    assert charge(50_000) == pytest.approx(0.05)
    assert charge(325_000) == pytest.approx(0.1 + 0.05 + 0.0125)
    found = estimate(workload(parse_rate("1e6/month"), MIX, SMALL), profile(), SMALL, table)
    # 75,000 + 250,000 invocations: $0.1625 shared 75:250.
    assert [line.usd[Service.LAMBDA] for line in found.lines] == pytest.approx(
        [0.1625 * 75 / 325 + 0.75, 0.1625 * 250 / 325 + 0.0625]
    )


def test_the_table_shows_each_job_types_quantities_and_dollars_the_total_and_every_assumption() -> None:
    text = render_estimate(month())
    lines = text.splitlines()
    assert lines[0].startswith("1M jobs a month")
    quantities = next(line.split() for line in lines if line.startswith("alpha ") and "std" in line)
    assert quantities == ["alpha", "std", "750K", "300K", "1.5M", "1.5M", "75K", "75K", "0.724", "75K"]
    total = next(line.split() for line in lines if line.startswith("total "))
    assert total[-2] == total[-1]  # a month of 1M jobs costs its $ per million jobs
    assert "(fixed): 24 alarm metrics and 12 custom metrics the stack keeps whatever the load" in lines
    assert "prices: test-1 as of 2026-12-01; profile measured 2026-12-01T12:00:00+00:00" in lines
    assert len([line for line in lines if line.startswith("assumed: ")]) == len(month().assumptions)
    assert lines[-1].startswith("not counted: ")


def test_this_projects_stack_counts_61_alarm_metrics_and_38_custom_metrics() -> None:
    # 43 alarms in the synthesized template (4 of them sweep-accounts' per-shard dead man's switches),
    # 6 of them retry-rate alarms reading 4 metrics each.
    assert alarm_metrics(TOPOLOGY) == 61
    # 6 job types x 4, 2 relays (the outbox, the orders stream) x 4, 2 schedules and sweep-accounts' 4 shards.
    assert custom_metrics(TOPOLOGY) == 38


def test_the_packaged_price_table_prices_every_meter_and_names_its_region() -> None:
    table = load_prices()
    assert table.region == "us-east-1"
    assert set(table.prices) == set(Meter)
    assert all(price.url.startswith("https://aws.amazon.com/") for price in table.prices.values())


def test_the_observed_rate_and_mix_are_the_hours_successes() -> None:
    stats = [
        JobStats(queue="std", job_type="alpha", counts={"Succeeded": 2700, "Retried": 50}),
        JobStats(queue="ordered", job_type="beta", counts={"Succeeded": 900}),
        JobStats(queue="std", job_type="idle", counts={}),
    ]
    found = observed_workload(stats, timedelta(hours=1))
    assert found.jobs_per_second == pytest.approx(1.0)
    assert found.mix == {"alpha": 0.75, "beta": 0.25}


def test_an_hour_without_successes_is_refused() -> None:
    with pytest.raises(CostDataError, match="no job succeeded in the last 1h"):
        observed_workload([JobStats(queue="std", job_type="alpha")], timedelta(hours=1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alpha", "expected job_type=share"),
        ("alpha=", "expected job_type=share"),
        ("=1", "expected job_type=share"),
        ("alpha=half", "expected job_type=share"),
        ("alpha=-0.5,beta=1.5", "expected job_type=share"),
        ("alpha=nan", "expected job_type=share"),
        ("alpha=0.5,alpha=0.5", "given twice"),
    ],
)
def test_bad_mixes_are_refused(text: str, message: str) -> None:
    with pytest.raises(CostInputError, match=message):
        parse_mix(text)


def test_a_mix_of_undeclared_job_types_is_refused_by_name() -> None:
    with pytest.raises(UnknownJobTypeError, match="unknown job type 'gamma'; declared: alpha, beta"):
        workload(1.0, {"alpha": 0.5, "gamma": 0.5}, SMALL)


@pytest.mark.parametrize("shares", [(0.5, 0.4999), (0.75, 0.25 + 2e-6), (0.0, 0.0)])
def test_a_mix_that_does_not_sum_to_1_is_refused(shares: tuple[float, float]) -> None:
    with pytest.raises(CostInputError, match="the shares sum to"):
        workload(1.0, dict(zip(MIX, shares, strict=True)), SMALL)


def test_a_mix_within_a_millionth_of_1_is_accepted_and_a_share_of_0_left_out() -> None:
    assert workload(1.0, {"alpha": 0.3333333, "beta": 0.6666664}, SMALL).mix["beta"] == 0.6666664
    assert workload(1.0, {"alpha": 1.0, "beta": 0.0}, SMALL).mix == {"alpha": 1.0}


def test_a_rate_not_above_0_is_refused() -> None:
    with pytest.raises(CostInputError, match="must be above 0"):
        workload(0.0, MIX, SMALL)


def test_a_missing_profile_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(CostDataError, match=r"results.json: no such file; run `make bench`"):
        load_profile(tmp_path / "results.json")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{not json", "Invalid JSON"),
        (json.dumps({"job_profiles": {}}), "measured_at: Field required"),
        (
            json.dumps({**PROFILE, "job_profiles": {"alpha": {**PROFILE["job_profiles"]["alpha"], "queue": None}}}),
            "job_profiles.alpha.queue: Input should be a valid string",
        ),
        (
            json.dumps(
                {**PROFILE, "job_profiles": {"alpha": {**PROFILE["job_profiles"]["alpha"], "invocations_per_job": -1}}}
            ),
            "invocations_per_job: Input should be greater than or equal to 0",
        ),
        (
            json.dumps(
                {
                    **PROFILE,
                    "job_profiles": {"alpha": {**PROFILE["job_profiles"]["alpha"], "requests_per_job": {"PutItem": 1}}},
                }
            ),
            "requests_per_job.PutItem.\\[key\\]: String should match pattern",
        ),
    ],
)
def test_a_malformed_profile_names_the_file_and_the_field(tmp_path: Path, document: str, message: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(document)
    with pytest.raises(CostDataError, match=f"profile {path}: .*{message}"):
        load_profile(path)


def test_a_job_type_the_profile_did_not_measure_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({**PROFILE, "job_profiles": {"alpha": PROFILE["job_profiles"]["alpha"]}}))
    with pytest.raises(CostDataError, match=f"profile {path} has no row for job type 'beta'; run `make bench`"):
        estimate(workload(1.0, MIX, SMALL), load_profile(path), SMALL, prices())


def test_a_profile_measured_on_another_queue_is_refused() -> None:
    moved = json.loads(json.dumps(PROFILE))
    moved["job_profiles"]["beta"]["queue"] = "std"
    with pytest.raises(CostDataError, match="measured job type 'beta' on queue 'std', but it is declared on 'ordered'"):
        estimate(workload(1.0, MIX, SMALL), profile(moved), SMALL, prices())


@pytest.mark.parametrize("operation", ["lambda.Invoke", "dynamodb.Scan"])
def test_a_request_the_model_cannot_price_is_refused_by_name(operation: str) -> None:
    unpriced = json.loads(json.dumps(PROFILE))
    unpriced["job_profiles"]["alpha"]["requests_per_job"][operation] = 1.0
    with pytest.raises(CostDataError, match=f"no pricing rule for {operation}"):
        estimate(workload(1.0, MIX, SMALL), profile(unpriced), SMALL, prices())


def price_table_with(meter: str, price: dict[str, Any] | None) -> str:
    document = json.loads(json.dumps(PRICES))
    if price is None:
        del document["prices"][meter]
    else:
        document["prices"][meter] = price
    return json.dumps(document)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (price_table_with("xray_traces_scanned", None), "prices: no xray_traces_scanned"),
        (price_table_with("xray_traces_scanned", {**flat(0.5), "url": "https://example.com/"}), "should match pattern"),
        (price_table_with("xray_traces_scanned", {**flat(0.5), "tiers": [{"usd": 1}]}), "give either usd or tiers"),
        (
            price_table_with(
                "xray_traces_scanned",
                {
                    "unit": "trace",
                    "tiers": [{"up_to": 10, "usd": 1}, {"up_to": 5, "usd": 1}, {"usd": 1}],
                    "url": "https://aws.amazon.com/xray/pricing/",
                },
            ),
            "tiers need rising up_to bounds",
        ),
        (price_table_with("lambda_gb_seconds", flat(1.0)), "Input should be 'lambda_requests'"),
        (json.dumps({**PRICES, "as_of": "last week"}), "as_of: Input should be a valid date"),
    ],
)
def test_a_malformed_price_table_names_the_file_and_the_field(tmp_path: Path, document: str, message: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(document)
    with pytest.raises(CostDataError, match=f"price table {path}: .*{message}"):
        load_prices(path)
