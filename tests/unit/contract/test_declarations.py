"""Declarations fail at import with one line naming the declaration and the broken rule."""

from datetime import timedelta
from typing import Any

import pytest

from conveyor.contract.declarations import (
    MAX_ATTEMPTS_LIMIT,
    REDRIVE_BACKSTOP_MARGIN,
    JobType,
    Queue,
    RetryPolicy,
    StreamRule,
    Table,
)
from conveyor.contract.errors import DeclarationError
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.topology import Topology

MINUTE = timedelta(minutes=1)


class Empty(Payload):
    pass


def _noop(payload: Empty, ctx: JobContext) -> None:
    ctx.logger.debug("ran")


def job_type(name: str, queue: str, **options: Any) -> JobType[Empty]:
    return JobType(name, queue, model=Empty, handler=_noop, **options)


def queue(name: str = "default", **overrides: Any) -> Queue:
    return Queue(name, age_objective=overrides.pop("age_objective", MINUTE), **overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"visibility_timeout": timedelta(seconds=60)}, "visibility_timeout 1m is under 6 x function_timeout (3m)"),
        ({"fifo": True, "batching_window": timedelta(seconds=5)}, "a FIFO queue cannot have a batching_window"),
        ({"fifo": True, "batch_size": 11}, "batch_size must be between 1 and 10 on a FIFO queue"),
        ({"batch_size": 50}, "batch_size above 10 needs a batching_window"),
        ({"batch_size": 20_000, "batching_window": MINUTE}, "batch_size must be between 1 and 10000"),
        ({"batching_window": timedelta(seconds=301)}, "batching_window must be between 0 and 5m"),
        ({"max_concurrency": 1}, "max_concurrency must be between 2 and 1000"),
        ({"max_concurrency": 10, "reserved_concurrency": 5}, "reserved_concurrency (5) must not be below"),
        ({"retention": timedelta(days=14)}, "retention must be at least 1m and under 14d"),
        ({"age_objective": timedelta(days=5)}, "age_objective must be positive and shorter than retention"),
        ({"function_timeout": timedelta(minutes=16)}, "function_timeout must be between 1s and 15m"),
        ({"visibility_timeout": timedelta(hours=13)}, "visibility_timeout must not exceed 12h"),
        ({"memory_mb": 64}, "memory_mb must be between 128 and 10240"),
        ({"max_retry_rate": 1.5}, "max_retry_rate must lie between 0 and 1, got 1.5"),
        ({"latency_objective": timedelta(0)}, "latency_objective must be positive"),
    ],
)
def test_undeployable_queue_fails_naming_queue_and_rule(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        queue("bulk", **overrides)
    assert str(raised.value).startswith("queue 'bulk': ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("name", ["Bulk", "bulk_jobs", "9lives", "", "x" * 41])
def test_queue_name_must_fit_a_physical_sqs_name(name: str) -> None:
    with pytest.raises(DeclarationError, match="name must match"):
        queue(name)


def test_latency_objective_defaults_to_the_wait_plus_one_run() -> None:
    assert queue(function_timeout=timedelta(seconds=45)).effective_latency_objective == MINUTE + timedelta(seconds=45)
    assert queue(latency_objective=timedelta(seconds=5)).effective_latency_objective == timedelta(seconds=5)


def test_visibility_defaults_to_six_times_the_function_timeout() -> None:
    assert queue(function_timeout=timedelta(seconds=45)).effective_visibility_timeout == timedelta(seconds=270)
    explicit = queue(function_timeout=timedelta(seconds=10), visibility_timeout=timedelta(minutes=5))
    assert explicit.effective_visibility_timeout == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("retry", "message"),
    [
        (RetryPolicy(max_attempts=0), "retry.max_attempts must be between 1 and 25, got 0"),
        (RetryPolicy(max_attempts=MAX_ATTEMPTS_LIMIT + 1), "retry.max_attempts must be between 1 and 25"),
        (RetryPolicy(base=timedelta(0)), "retry.base must be positive"),
        (RetryPolicy(base=MINUTE, cap=timedelta(seconds=30)), "retry.cap must lie between retry.base"),
        (RetryPolicy(cap=timedelta(hours=13)), "retry.cap must lie between retry.base"),
        (RetryPolicy(max_wall_time=timedelta(0)), "retry.max_wall_time must be positive"),
    ],
)
def test_bad_retry_policy_fails_naming_the_job_type(retry: RetryPolicy, message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        job_type("charge_order", queue="critical", retry=retry)
    assert str(raised.value).startswith("job type 'charge_order': ")
    assert message in str(raised.value)


def test_job_routed_to_unknown_queue_lists_the_declared_ones() -> None:
    with pytest.raises(DeclarationError) as raised:
        Topology(queues=(queue("default"), queue("bulk")), job_types=(job_type("send_email", queue="critcal"),))
    assert str(raised.value) == ("job type 'send_email': routed to unknown queue 'critcal' (declared: bulk, default)")


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(DeclarationError, match="queue 'default': declared twice"):
        Topology(queues=(queue("default"), queue("default")))
    with pytest.raises(DeclarationError, match="job type 'send_email': declared twice"):
        Topology(
            queues=(queue("default"),),
            job_types=(job_type("send_email", queue="default"), job_type("send_email", queue="default")),
        )


def test_topology_needs_a_queue() -> None:
    with pytest.raises(DeclarationError, match="declare at least one queue"):
        Topology(queues=())


def test_job_timeout_must_fit_the_queue_function_timeout() -> None:
    with pytest.raises(DeclarationError, match=r"timeout exceeds the function_timeout of queue 'default' \(30s\)"):
        Topology(queues=(queue(),), job_types=(job_type("slow", queue="default", timeout=MINUTE),))


def test_retry_wall_time_must_fit_the_queue_retention() -> None:
    with pytest.raises(DeclarationError, match="messages would expire before their last attempt"):
        Topology(
            queues=(queue(retention=timedelta(days=1)),),
            job_types=(job_type("slow", queue="default", retry=RetryPolicy(max_wall_time=timedelta(days=2))),),
        )


def test_redrive_backstop_sits_above_the_most_attempts_on_the_queue() -> None:
    topology = Topology(
        queues=(queue("default"), queue("bulk"), queue("empty")),
        job_types=(
            job_type("a", queue="default", retry=RetryPolicy(max_attempts=3)),
            job_type("b", queue="default", retry=RetryPolicy(max_attempts=12)),
            job_type("c", queue="bulk", retry=RetryPolicy(max_attempts=1)),
        ),
    )
    assert topology.max_receive_count("default") == 12 + REDRIVE_BACKSTOP_MARGIN
    # Never under the AWS-recommended 5, so throttled batches are not dead-lettered.
    assert topology.max_receive_count("bulk") == 5
    # A queue with no job types yet still gets the default policy's backstop.
    assert topology.max_receive_count("empty") == RetryPolicy().max_attempts + REDRIVE_BACKSTOP_MARGIN
    assert [job.name for job in topology.job_types_on("default")] == ["a", "b"]


def test_unknown_queue_lookup_names_it() -> None:
    with pytest.raises(DeclarationError, match="unknown queue 'nope'"):
        Topology(queues=(queue(),)).queue("nope")


def test_project_topology_isolates_critical_from_bulk() -> None:
    from functions.topology import TOPOLOGY

    critical, bulk, default = TOPOLOGY.queue("critical"), TOPOLOGY.queue("bulk"), TOPOLOGY.queue("default")
    assert critical.reserved_concurrency is not None
    assert critical.reserved_concurrency >= critical.max_concurrency > default.max_concurrency
    assert critical.age_objective < default.age_objective
    assert bulk.batch_size > default.batch_size
    assert bulk.batching_window > timedelta(0)
    assert bulk.max_concurrency < default.max_concurrency


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (lambda: Table("idempotency", key="id"), "table 'idempotency': the name is reserved"),
        (lambda: Table("outbox", key="id"), "table 'outbox': the name is reserved"),
        (lambda: Table("Effects", key="id"), "table 'Effects': name must match"),
        (lambda: Table("effects", key="bad key"), "attribute name 'bad key' is not a valid DynamoDB attribute name"),
        (
            lambda: Topology(queues=(queue(),), tables=(Table("effects", key="k"), Table("effects", key="k"))),
            "table 'effects': declared twice",
        ),
    ],
)
def test_bad_table_declarations_fail_naming_the_table(table: Any, message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        table()
    assert message in str(raised.value)


def test_queue_named_like_the_relay_dlq_is_reserved() -> None:
    with pytest.raises(DeclarationError, match="queue 'relay': the name is reserved"):
        queue("relay")


def _rule(**overrides: Any) -> StreamRule:
    options: dict[str, Any] = {
        "table": "orders",
        "job": "charge",
        "when": lambda item: item.get("status") == "NEW",
        "payload": lambda item: {},
    }
    return StreamRule(overrides.pop("name", "new-orders"), **(options | overrides))


def _with_rules(*rules: StreamRule, fifo: bool = False) -> Topology:
    return Topology(
        queues=(queue(fifo=fifo),),
        job_types=(job_type("charge", "default"),),
        tables=(Table("orders", key="order_id"), Table("notes", key="id")),
        stream_rules=rules,
    )


def test_stream_rules_stream_only_the_tables_they_read() -> None:
    topology = _with_rules(_rule())
    assert [table.name for table in topology.streamed_tables()] == ["orders"]
    assert [rule.name for rule in topology.rules_for("orders")] == ["new-orders"]
    assert topology.rules_for("notes") == ()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: _with_rules(_rule(table="payments")), "stream rule 'new-orders': table 'payments' is not declared"),
        (lambda: _with_rules(_rule(job="refund")), "stream rule 'new-orders': job type 'refund' is not declared"),
        (lambda: _with_rules(_rule(), _rule()), "stream rule 'new-orders': declared twice"),
        (
            lambda: _with_rules(_rule(), fifo=True),
            "runs on FIFO queue 'default', and a stream rule has no message group",
        ),
        (lambda: _rule(name="New Orders"), "stream rule 'New Orders': name must match"),
        (lambda: _rule(when="status == NEW"), "when and payload must be callables"),
    ],
)
def test_bad_stream_rules_fail_naming_the_rule(build: Any, message: str) -> None:
    with pytest.raises(DeclarationError) as raised:
        build()
    assert message in str(raised.value)
