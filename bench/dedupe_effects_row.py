"""Row 8: requests per job for dedupe at enqueue, and ledger writes per effect (issue 21).

What docs/contracts.md ("Dedupe at enqueue") and docs/effects.md ("Cost and retention") say these
cost, counted: every request of the SDK's ``JobClient``, the stream relay (``Relay.handle``) and
the worker's harness, by bench.counting's hook, on in-process moto held to AWS's limits by strict
mode and provisioned as the local runtime provisions (``conveyor.testing.run_jobs``, which also
runs the jobs through the real harness on a clock it moves). Counted requests, never timings.

Dedupe at enqueue, ``jobs`` jobs a scenario: ``enqueue_many`` without keys is the anchor (SQS's
SendMessageBatch per 10 jobs, no DynamoDB); then each job with a new key (a claim and a mark per
job, the same sends); then a duplicate of each (one refused claim, nothing sent). ``transact`` makes
one job a call, without and with a key, and the relay sends on what the outbox's stream holds, read
as Lambda's mapping delivers it: a keyed item costs the relay one claim.

The effect ledger, ``effect_jobs`` jobs of one effect each: each run records its effect (intent,
then confirm) and then dies before the job returns, as a run that crashed after the provider acted;
its retry finds the effect confirmed in its one intent write and does not call again. The requests
are counted around each ``ctx.effect`` block, where the harness runs it in this process, by whether
its attempt was the first: the clock ticks on while the first attempts run, so a retry may come due
before they all have, and a count by pass would mix them.
"""

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from bench.counting import Call, Counts, RequestCounter, builtin_handlers_restored, by_operation, counting
from bench.figures import Figure, Row, Table, Target
from conveyor.contract import relay_mapping
from conveyor.contract.declarations import Queue
from conveyor.contract.destinations import Destination
from conveyor.contract.job_context import JobContext
from conveyor.contract.payloads import Payload
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.contract.topology import Topology
from conveyor.local import strict
from conveyor.local.demo import worker_logs_to
from conveyor.local.stream_source import drop_moto_duplicates, to_lambda_record
from conveyor.sdk.jobs import job
from conveyor.sdk.prepare import JobRequest
from conveyor.testing import Jobs, run_jobs
from conveyor.worker.relay import Relay

KEY = "dedupe_effects"
TITLE = "Requests per job for dedupe at enqueue, and DynamoDB writes per effect of the effect ledger"
# The effect scenarios: the jobs' two attempts whole, then the ctx.effect blocks of each.
EFFECT_JOBS = "jobs of one effect, both attempts"
FIRST_RUN = "ctx.effect blocks of first attempts: intent + confirm"
RETRY = "ctx.effect blocks of retries, the effect confirmed"
JOB_UNIT = "req/job"
EFFECT_UNIT = "req/effect"
ACTION_UNIT = "actions/job"
# Where run_jobs starts its clock: any fixed instant, so a run's items expire alike.
START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

QUEUE = Queue("dedupe-bench", age_objective=timedelta(minutes=1))
PARTNER = Destination("ledger_partner", effects=("charge",))
CHARGE = f"{PARTNER.name}.charge"


class Order(Payload):
    n: int = 0


class LostAnswerError(Exception):
    """The run dying after its provider acted and its effect was confirmed: unclassified, so retried."""


@job("dedupe_bench_order", queue=QUEUE.name, model=Order)
def dedupe_bench_order(payload: Order, ctx: JobContext) -> None:
    """Never run: the dedupe scenarios only enqueue."""


def charge(idempotency_key: str) -> None:
    """The provider's call: nothing, so only the ledger's requests are counted."""


class EffectBlocks:
    """The requests made inside each ``ctx.effect`` block of ``effect_bench_charge``, by whether its attempt was
    the first, while ``counted_by`` a counter."""

    def __init__(self) -> None:
        self._counter: RequestCounter | None = None
        self.counts: dict[bool, Counts] = {}
        self.blocks: Counter[bool] = Counter()

    @contextmanager
    def counted_by(self, counter: RequestCounter) -> Iterator["EffectBlocks"]:
        self._counter, self.counts, self.blocks = counter, {True: Counter(), False: Counter()}, Counter()
        try:
            yield self
        finally:
            self._counter = None

    @contextmanager
    def block(self, *, first: bool) -> Iterator[None]:
        if self._counter is None:
            raise RuntimeError("effect_bench_charge runs only under EFFECT_BLOCKS.counted_by (bench's measure)")
        before = self._counter.snapshot()
        yield
        self.counts[first] += self._counter.since(before)
        self.blocks[first] += 1


EFFECT_BLOCKS = EffectBlocks()


@job("effect_bench_charge", queue=QUEUE.name, model=Order)
def effect_bench_charge(payload: Order, ctx: JobContext) -> None:
    """One effect, whose provider call is nothing; the first attempt dies once it is confirmed."""
    with EFFECT_BLOCKS.block(first=ctx.attempt == 1), ctx.effect(CHARGE) as effect:
        if not effect.done:
            charge(effect.key)
    if ctx.attempt == 1:
        raise LostAnswerError("the run died after the charge was confirmed")


TOPOLOGY = Topology(queues=(QUEUE,), job_types=(dedupe_bench_order, effect_bench_charge), destinations=(PARTNER,))


@dataclass(frozen=True)
class Measured:
    """One scenario's requests, over the ``jobs`` jobs (or effects) it made."""

    label: str
    jobs: int
    counts: Counts
    # The write actions of every TransactWriteItems the scenario made, all told.
    actions: int = 0

    def per_job(self, keep: Callable[[Call], bool]) -> float:
        return sum(count for call, count in self.counts.items() if keep(call)) / self.jobs


def _service(name: str) -> Callable[[Call], bool]:
    return lambda call: call.service == name


SQS, DYNAMODB = _service("sqs"), _service("dynamodb")


class Scenarios:
    """The scenarios of one run, each counted apart on one counter."""

    def __init__(self, counter: RequestCounter) -> None:
        self._counter = counter
        self.measured: dict[str, Measured] = {}

    @contextmanager
    def scenario(self, label: str, jobs: int, *, actions: Callable[[], int] = lambda: 0) -> Iterator[None]:
        before, actions_before = self._counter.snapshot(), actions()
        yield
        self.measured[label] = Measured(label, jobs, self._counter.since(before), actions() - actions_before)


class TransactionActions:
    """Counts the write actions of every TransactWriteItems a client makes: what the request count cannot show."""

    def __init__(self, dynamodb: Any) -> None:
        self.count = 0
        dynamodb.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", self._on_request)

    def _on_request(self, params: dict[str, Any], **_: Any) -> None:
        self.count += len(params["TransactItems"])


class OutboxStream:
    """The outbox table's stream as the relay's mapping delivers it: each INSERT once, in Lambda's shape."""

    def __init__(self, jobs: Jobs) -> None:
        self._streams = boto3.client("dynamodbstreams")
        self._arn = jobs.provisioned.streams[OUTBOX_SOURCE]
        self._delivered: set[str] = set()

    def new_inserts(self) -> list[dict[str, Any]]:
        """The INSERT records not delivered before, read from the stream's start, oldest first."""
        read: list[dict[str, Any]] = []
        for shard in self._streams.describe_stream(StreamArn=self._arn)["StreamDescription"]["Shards"]:
            iterator = self._streams.get_shard_iterator(
                StreamArn=self._arn, ShardId=shard["ShardId"], ShardIteratorType=relay_mapping.STARTING_POSITION
            )["ShardIterator"]
            while iterator and (response := self._streams.get_records(ShardIterator=iterator))["Records"]:
                read += response["Records"]
                iterator = response.get("NextShardIterator")
        fresh = [
            record
            for record in drop_moto_duplicates(read)
            if record["eventName"] == relay_mapping.EVENT_NAME
            and record["dynamodb"]["SequenceNumber"] not in self._delivered
        ]
        self._delivered.update(record["dynamodb"]["SequenceNumber"] for record in fresh)
        return [to_lambda_record(record, stream_arn=self._arn) for record in fresh]


def _relay_all(relay: Relay, records: list[dict[str, Any]], expected: int) -> None:
    """Hand the relay the records in the mapping's batches; every one must go out."""
    if len(records) != expected:
        raise RuntimeError(f"the outbox stream held {len(records)} new items, not the {expected} jobs written")
    for start in range(0, len(records), relay_mapping.BATCH_SIZE):
        if failed := relay.handle({"Records": records[start : start + relay_mapping.BATCH_SIZE]})["batchItemFailures"]:
            raise RuntimeError(f"the relay reported {len(failed)} records failed")


def _dedupe(scenarios: Scenarios, jobs: int) -> None:
    with run_jobs(TOPOLOGY, start=START) as run:
        client = run.client
        client.enqueue(dedupe_bench_order, Order())  # the client's one GetQueueUrl, left out of every scenario
        with scenarios.scenario("enqueue_many, no dedupe keys", jobs):
            client.enqueue_many([JobRequest(dedupe_bench_order, Order(n=n)) for n in range(jobs)])
        with scenarios.scenario("enqueue_many, a new dedupe key each", jobs):
            first = client.enqueue_many(
                [JobRequest(dedupe_bench_order, Order(n=n), dedupe_key=f"order-{n}") for n in range(jobs)]
            )
        with scenarios.scenario("enqueue_many, duplicates of keys sent", jobs):
            again = client.enqueue_many(
                [JobRequest(dedupe_bench_order, Order(n=jobs + n), dedupe_key=f"order-{n}") for n in range(jobs)]
            )
        if again != first:
            raise RuntimeError("an enqueue of a dedupe key already sent did not return the first job's id")
        actions = TransactionActions(client.dynamodb)
        stream = OutboxStream(run)
        relay = Relay(
            TOPOLOGY,
            run.provisioned.relay_settings(OUTBOX_SOURCE),
            sqs_client=client.sqs,
            dynamodb_client=client.dynamodb,
        )
        for keyed in (False, True):
            kind = "a new dedupe key each" if keyed else "no dedupe keys"
            with scenarios.scenario(f"transact, {kind}", jobs, actions=lambda: actions.count):
                for n in range(jobs):
                    key = f"transact-{n}" if keyed else None
                    client.transact([], [JobRequest(dedupe_bench_order, Order(n=n), dedupe_key=key)])
            records = stream.new_inserts()
            with scenarios.scenario(f"relay of those outbox items, {kind}", jobs):
                _relay_all(relay, records, jobs)


def _effects(scenarios: Scenarios, counter: RequestCounter, jobs: int) -> str:
    """The ledger's table name, once both attempts of every job are counted."""
    with run_jobs(TOPOLOGY, start=START) as run, EFFECT_BLOCKS.counted_by(counter) as blocks:
        run.client.enqueue_many([JobRequest(effect_bench_charge, Order(n=n)) for n in range(jobs)])
        with scenarios.scenario(EFFECT_JOBS, jobs):
            run.drain()
        if run.retried(effect_bench_charge) != jobs or run.succeeded(effect_bench_charge) != jobs:
            raise RuntimeError(f"of {jobs} jobs, {run.retried()} were retried and {run.succeeded()} succeeded")
        for first, label in ((True, FIRST_RUN), (False, RETRY)):
            scenarios.measured[label] = Measured(label, blocks.blocks[first], blocks.counts[first])
        return run.provisioned.ledger_table


def measure(*, jobs: int, effect_jobs: int) -> Row:
    """The dedupe scenarios of ``jobs`` jobs each, then ``effect_jobs`` jobs of one effect, each run twice."""
    refused_before = len(strict.refused())
    with builtin_handlers_restored(), counting() as counter, worker_logs_to(Path(os.devnull)):
        scenarios = Scenarios(counter)
        _dedupe(scenarios, jobs)
        ledger = _effects(scenarios, counter, effect_jobs)
    return row(scenarios.measured, ledger_table=ledger, refused=len(strict.refused()) - refused_before)


def _figure(
    name: str,
    value: float,
    unit: str,
    *,
    at_most: float | None = None,
    anchor: Figure | None = None,
    same_as_anchor: bool = False,
) -> Figure:
    """A count beside ``anchor``'s, if given; held to ``at_most`` (the documented count), or to no more than
    its anchor's (``same_as_anchor``)."""
    target = Target(1.0) if same_as_anchor else None
    if at_most is not None:
        target = Target(at_most, on_ratio=False, unit=unit)
    return Figure(
        name,
        value,
        unit,
        anchor=None if anchor is None else anchor.value,
        anchor_label="" if anchor is None else anchor.name.split(":", 1)[0],
        target=target,
    )


def row(measured: dict[str, Measured], *, ledger_table: str, refused: int = 0) -> Row:
    plain, keyed, duplicates = (
        measured[f"enqueue_many, {kind}"]
        for kind in ("no dedupe keys", "a new dedupe key each", "duplicates of keys sent")
    )
    transact_plain, transact_keyed = (measured[f"transact, {k}"] for k in ("no dedupe keys", "a new dedupe key each"))
    relay_plain, relay_keyed = (
        measured[f"relay of those outbox items, {k}"] for k in ("no dedupe keys", "a new dedupe key each")
    )
    first_run, retry = measured[FIRST_RUN], measured[RETRY]

    def ledger(call: Call) -> bool:
        return DYNAMODB(call) and call.resource == ledger_table

    sqs_anchor = _figure(
        f"enqueue_many without dedupe keys: SQS requests per job ({plain.jobs:,} jobs)", plain.per_job(SQS), JOB_UNIT
    )
    transact_anchor = _figure(
        f"transact without a dedupe key: DynamoDB requests per job ({transact_plain.jobs:,} calls of one job)",
        transact_plain.per_job(DYNAMODB),
        JOB_UNIT,
    )
    actions_anchor = _figure(
        "transact without a dedupe key: write actions per job",
        transact_plain.actions / transact_plain.jobs,
        ACTION_UNIT,
    )
    figures = (
        sqs_anchor,
        _figure(
            f"enqueue_many without dedupe keys: DynamoDB requests per job ({plain.jobs:,} jobs)",
            plain.per_job(DYNAMODB),
            JOB_UNIT,
            at_most=0,
        ),
        _figure(
            f"enqueue_many, a new dedupe key each: DynamoDB requests per job ({keyed.jobs:,} jobs)",
            keyed.per_job(DYNAMODB),
            JOB_UNIT,
            at_most=2,
        ),
        _figure(
            f"enqueue_many, a new dedupe key each: SQS requests per job ({keyed.jobs:,} jobs)",
            keyed.per_job(SQS),
            JOB_UNIT,
            anchor=sqs_anchor,
            same_as_anchor=True,
        ),
        _figure(
            f"enqueue_many, duplicates of keys already sent: DynamoDB requests per job ({duplicates.jobs:,} jobs)",
            duplicates.per_job(DYNAMODB),
            JOB_UNIT,
            at_most=1,
        ),
        _figure(
            f"enqueue_many, duplicates of keys already sent: SQS requests per job ({duplicates.jobs:,} jobs)",
            duplicates.per_job(SQS),
            JOB_UNIT,
            at_most=0,
        ),
        transact_anchor,
        _figure(
            f"transact with a new dedupe key: DynamoDB requests per job ({transact_keyed.jobs:,} calls of one job)",
            transact_keyed.per_job(DYNAMODB),
            JOB_UNIT,
            at_most=2,
            anchor=transact_anchor,
        ),
        actions_anchor,
        _figure(
            "transact with a new dedupe key: write actions per job",
            transact_keyed.actions / transact_keyed.jobs,
            ACTION_UNIT,
            at_most=2,
            anchor=actions_anchor,
        ),
        _figure(
            f"relay of outbox items without dedupe keys: DynamoDB requests per job ({relay_plain.jobs:,} items)",
            relay_plain.per_job(DYNAMODB),
            JOB_UNIT,
            at_most=0,
        ),
        _figure(
            f"relay of outbox items with a dedupe key: DynamoDB requests per job ({relay_keyed.jobs:,} items)",
            relay_keyed.per_job(DYNAMODB),
            JOB_UNIT,
            at_most=1,
        ),
        _figure(
            f"ctx.effect, first run (intent + confirm): ledger requests per effect ({first_run.jobs:,} effects)",
            first_run.per_job(ledger),
            EFFECT_UNIT,
            at_most=2,
        ),
        _figure(
            f"ctx.effect on a retry, the effect already confirmed: ledger requests per effect ({retry.jobs:,} effects)",
            retry.per_job(ledger),
            EFFECT_UNIT,
            at_most=1,
        ),
    )
    lines = [
        (m.label, call.name, call.resource, str(count), f"{count / m.jobs:.3f}")
        for m in measured.values()
        for call, count in sorted(m.counts.items())
        if m.label != EFFECT_JOBS or DYNAMODB(call)
    ]
    table = Table(
        f"Requests by scenario, operation and queue or table ({EFFECT_JOBS}: DynamoDB only)",
        ("scenario", "request", "queue or table", "requests", "per job or effect"),
        tuple(lines),
    )
    notes = [
        "Anchors: enqueue_many and transact of the same jobs without dedupe keys, in the same run. Every figure "
        "is a count of requests (or of a transaction's write actions), never a timing.",
        "In-process moto with strict mode, provisioned as the local runtime does (conveyor.testing.run_jobs); the "
        "SDK's JobClient, the stream relay (Relay.handle on the outbox's stream, in the mapping's batches of "
        f"{relay_mapping.BATCH_SIZE}) and the harness, every request counted. The client's one GetQueueUrl is "
        "left out.",
        "A transact call makes one job. The relay claims an outbox item's key taken as sent at once, "
        "as Lambda retries a record whose send failed.",
        "The effect's first run dies once its effect is confirmed (a run that crashed after the provider acted), "
        "so the same jobs' retries find it confirmed. The effect figures count the ledger's requests inside each "
        "ctx.effect block, by whether its attempt was the first; the table shows every DynamoDB request of the "
        "jobs' two attempts beside them (the idempotency record's).",
        'The targets are the documented counts: docs/contracts.md ("Dedupe at enqueue") and docs/effects.md '
        '("Two writes per effect"; a confirmed effect costs one), issue 21.',
    ]
    if refused:
        notes.append(f"Strict mode refused {refused} request(s) AWS would refuse.")
    data: dict[str, Any] = {
        m.label: {"jobs": m.jobs, "requests": dict(by_operation(m.counts)), "transaction_actions": m.actions}
        for m in measured.values()
    }
    return Row(
        KEY,
        TITLE,
        figures,
        (table,),
        tuple(notes),
        data={"scenarios": data, "ledger_table": ledger_table, "refused": refused},
    )
