"""The demo scenario for the example jobs: hundreds of each, with faults injected, then checked.

What it sends, per job type:
- several hundred jobs through the SDK, in batches;
- transient faults (``flaky-<n>`` inputs) that succeed after backoff;
- permanent faults (a bounced address, a declined card, a 404 receiver) that must be dead-lettered;
- duplicate enqueues (same dedupe key, which must make no second job, or the same order, which
  the job type's idempotency key absorbs) and duplicate deliveries (the same body sent twice, as
  SQS may deliver it) that must cause no second effect;
and, straight to the queues, poison messages that must land in the DLQs with their reasons.

Then orders, charged through the stream relays rather than sent to SQS by their producer:
- orders placed through ``JobClient.transact``, each row committed with its charge in the
  outbox; some are placed again, as a client retrying after a lost response, and must be
  refused with no second job;
- orders written as rows only (status NEW), charged through the stream rule;
- one malformed outbox item from a foreign producer, which must land in the relay DLQ.

Before all that, while the queues are idle, the schedules fire from the scheduler emulator on
a clock the demo moves (``ScheduleDemo``): two nights of the nightly report and the sharded
sweeps in between run, the next four nights fall in a simulated outage, and the night after it
finds them missing and applies each schedule's policy; the run audit must account for every
occurrence once.
"""

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cached_property, partial
from typing import Any

from conveyor.contract import naming
from conveyor.contract.cron import next_occurrence, occurrences
from conveyor.contract.envelope import Envelope, new_job_id
from conveyor.contract.errors import TransactionConditionError
from conveyor.contract.reasons import Reason
from conveyor.contract.schedule_inputs import Occurrence
from conveyor.contract.schedules import Schedule
from conveyor.contract.settings import METRICS_NAMESPACE
from conveyor.local.demo import Invariant, Observed, queue_depth
from conveyor.local.runtime import LocalRuntime
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest
from conveyor.worker.metrics import SCHEDULE_DIMENSION, SCHEDULE_SUCCEEDED
from conveyor.worker.missed_runs import apply_missed_policy
from conveyor.worker.outcomes import Kind
from conveyor.worker.schedule_runs import CAUGHT_UP, RunStatus, ScheduleRuns, occurrence_job_id, shards_of
from functions.jobs.summarize_day import effect_key as summary_effect
from functions.jobs.summarize_day import summarize_day
from functions.jobs.sweep_accounts import effect_key as sweep_effect
from functions.jobs.sweep_accounts import sweep_accounts
from functions.orders import CHARGE_NEW_ORDERS, NEW, ORDER_ID, ORDERS_TABLE, Order, place_order
from functions.providers import email, payments, webhooks
from functions.providers.effects import EFFECTS_TABLE, KEY_ATTRIBUTE, EffectsLedger
from functions.topology import NIGHTLY_REPORT

JOBS_PER_TYPE = 200
# Every n-th job gets a fault or a duplicate; the remainders keep the sets apart.
TRANSIENT_EVERY, TRANSIENT_AT = 10, 3
PERMANENT_EVERY, PERMANENT_AT = 33, 7
DUPLICATE_EVERY, DUPLICATE_AT = 15, 0
DUPLICATE_DELIVERIES = 20
LEGACY_V1_MESSAGES = 10
POISON_COPIES = 4
# Orders get ids of their own, apart from the SDK's charges ("o-..."): their charges are told apart by it.
ORDER_ID_PREFIX = "ord-"
CHARGE_KEY_PREFIX = payments.effect_key("")
TRANSACT_ORDERS = 40
ROW_ONLY_ORDERS = 40
# Every n-th order placed through transact is placed a second time.
PLACE_AGAIN_EVERY = 8
ORDER_CURRENCY = "EUR"
# The relays read the streams on their own time: produce waits this long at most for every
# order to be charged and the relay DLQ to fill, polling at this interval.
RELAY_WAIT_S = 60.0
RELAY_POLL_S = 0.5
# The schedules' timeline, in nights of the nightly report: these fire, then these are missed, then one more fires.
NIGHTS_BEFORE_OUTAGE = 2
NIGHTS_MISSED = 4
# Each step of the emulator's clock waits at most this long for the runs it fired, polling at this interval.
SCHEDULE_WAIT_S = 30.0
SCHEDULE_POLL_S = 0.1
# A step moves the clock this far past an occurrence: past every shard's flexible window, so all are due.
WINDOW_MARGIN = timedelta(minutes=1)
# Metrics are read back over the run, with this margin (EMF timestamps come from the workers' clocks), per period.
METRIC_MARGIN = timedelta(minutes=1)
METRIC_PERIOD = timedelta(minutes=1)
# Where the emulator's occurrences start: (started_at - this, ...] includes the start itself.
JUST_BEFORE = timedelta(microseconds=1)
# The effect each scheduled job records, by schedule job type: its key is the job id.
SCHEDULED_EFFECTS: dict[str, Callable[[str], str]] = {
    summarize_day.name: summary_effect,
    sweep_accounts.name: sweep_effect,
}


class Placed(StrEnum):
    """How an order reached the orders table."""

    TRANSACT = "placed through transact"
    ROW_ONLY = "written as a row only"


@dataclass(frozen=True)
class Planned:
    """How one enqueued job must end: dead-lettered with a reason, or run (or absorbed as a duplicate).

    A duplicate enqueued with a dedupe key makes no job at all: its id is the first one's.
    """

    dead: Reason | None = None
    duplicate: bool = False
    deduped_at_enqueue: bool = False


@dataclass
class Plan:
    """What must come of the scenario, filled in as it is produced."""

    finishes: dict[str, Kind] = field(default_factory=dict)
    dead_letters: Counter[str] = field(default_factory=Counter)
    effects: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    # Duplicate enqueues with a dedupe key, and how many of them got the first job's id back.
    enqueue_duplicates: int = 0
    deduped_at_enqueue: int = 0
    orders: dict[str, Placed] = field(default_factory=dict)
    placed_again: int = 0
    refused: int = 0
    relay_dead_letters: Counter[str] = field(default_factory=Counter)

    def expect_job(self, job_id: str, *, dead: Reason | None = None, duplicate: bool = False) -> None:
        self.finishes[job_id] = Kind.DEAD_LETTERED if dead else Kind.SUCCEEDED
        self.duplicates += duplicate
        if dead:
            self.dead_letters[dead.value] += 1


# (schedule, scheduled time, shard) -> (status, reason): the run audit's rows, as read or as they must be.
AuditRows = dict[tuple[str, datetime, int | None], tuple[RunStatus, str | None]]


@dataclass(frozen=True)
class Timeline:
    """Where the emulator's clock went: from ``started_at`` to ``until``, sending nothing during the outage."""

    started_at: datetime
    outage_from: datetime
    outage_until: datetime
    until: datetime

    def in_outage(self, moment: datetime) -> bool:
        return self.outage_from < moment <= self.outage_until

    def expected_rows(self, schedules: Sequence[Schedule]) -> AuditRows:
        """Every occurrence since the start once: succeeded, or what the schedule's policy makes of the outage's."""
        rows: AuditRows = {}
        for schedule in schedules:
            every = occurrences(schedule, self.started_at - JUST_BEFORE, self.until, anchor=self.started_at)
            plan = apply_missed_policy(schedule, [moment for moment in every if self.in_outage(moment)])
            status: dict[datetime, tuple[RunStatus, str | None]] = dict.fromkeys(every, (RunStatus.SUCCEEDED, None))
            status |= dict.fromkeys(plan.to_enqueue, (RunStatus.SUCCEEDED, CAUGHT_UP))
            status |= dict.fromkeys(plan.to_record_missed, (RunStatus.MISSED, schedule.missed.reason))
            rows |= {(schedule.name, t, shard): row for t, row in status.items() for shard in shards_of(schedule)}
        return rows


class ScheduleDemo:
    """The schedules, fired by the emulator on a clock the demo moves from occurrence to occurrence.

    Each step waits until the runs it fired are recorded: in production occurrences are hours
    apart, and a run must have claimed its occurrence before the next one looks for missed ones.
    """

    def __init__(self) -> None:
        self.timeline: Timeline | None = None
        self._runtime: LocalRuntime | None = None
        self._began = datetime.now(UTC)  # reset by produce: where the metrics are read from

    @property
    def runtime(self) -> LocalRuntime:
        assert self._runtime is not None, "produce has not run"
        return self._runtime

    @cached_property
    def audit(self) -> ScheduleRuns:
        return ScheduleRuns(
            self.runtime.dynamodb, self.runtime.provisioned.schedule_runs_table, clock=lambda: datetime.now(UTC)
        )

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        return self.runtime.topology.schedules

    def produce(self, runtime: LocalRuntime) -> None:
        self._runtime = runtime
        self._began = datetime.now(UTC)
        scheduler = runtime.scheduler
        scheduler.clock.freeze()  # from here on, only the demo moves it
        start = scheduler.started_at
        nights = occurrences(NIGHTLY_REPORT, start, start + timedelta(days=NIGHTS_BEFORE_OUTAGE + NIGHTS_MISSED + 2))
        last_before, last_missed, after = (
            nights[NIGHTS_BEFORE_OUTAGE - 1],
            nights[NIGHTS_BEFORE_OUTAGE + NIGHTS_MISSED - 1],
            nights[NIGHTS_BEFORE_OUTAGE + NIGHTS_MISSED],
        )
        # Each step leaves the clock an occurrence's margin past it: there the outage begins, and ends.
        timeline = Timeline(
            start, outage_from=last_before + self._margin, outage_until=last_missed + self._margin, until=after
        )
        self._fire_until(last_before, timeline)
        scheduler.pause()
        scheduler.clock.set(timeline.outage_until)
        scheduler.resume()
        self._fire_until(after, timeline)
        self.timeline = timeline
        self._wait_for(partial(self._rows_are, timeline.expected_rows(self.schedules)))

    def _rows_are(self, expected: AuditRows) -> bool:
        return self._rows() == expected

    @property
    def _margin(self) -> timedelta:
        return max(schedule.flexible_window or timedelta(0) for schedule in self.schedules) + WINDOW_MARGIN

    def _fire_until(self, last: datetime, timeline: Timeline) -> None:
        """Step the clock through each occurrence up to ``last``, waiting each time for what is due to succeed."""
        scheduler = self.runtime.scheduler
        while True:
            due = min(filter(None, (next_occurrence(s, scheduler.clock()) for s in self.schedules)), default=None)
            if due is None or due > last:
                return
            scheduler.clock.set(due + self._margin)
            scheduler.tick()
            wanted = {
                (schedule.name, moment, shard)
                for schedule in self.schedules
                for moment in occurrences(schedule, timeline.started_at - JUST_BEFORE, due)
                if not timeline.in_outage(moment)
                for shard in shards_of(schedule)
            }
            self._wait_for(partial(self._succeeded, wanted))

    def _succeeded(self, runs: set[tuple[str, datetime, int | None]]) -> bool:
        rows = self._rows()
        return all(rows.get(run, (None, None))[0] is RunStatus.SUCCEEDED for run in runs)

    def _rows(self) -> AuditRows:
        return {
            (r.occurrence.schedule, r.occurrence.scheduled_time, r.occurrence.shard): (r.status, r.reason)
            for schedule in self.schedules
            for r in self.audit.runs(schedule.name)
        }

    def check(self, ledger: EffectsLedger) -> list[Invariant]:
        assert self.timeline is not None, "produce has not run"
        rows = self._rows()
        return [
            self._accounted_once(rows, self.timeline.expected_rows(self.schedules)),
            self._ran_once(rows, ledger),
            self._metric_matches(rows),
        ]

    def _accounted_once(self, rows: AuditRows, expected: AuditRows) -> Invariant:
        wrong = [
            f"{occurrence_job_id(Occurrence(*key))}: {rows.get(key)}, not {want}"
            for key, want in expected.items()
            if rows.get(key) != want
        ]
        wrong += [f"unexpected row {key}" for key in rows.keys() - expected.keys()]
        by_kind = Counter(
            (schedule, status.value + (f" {reason}" if reason else ""))
            for (schedule, _, _), (status, reason) in rows.items()
        )
        found = "; ".join(
            f"{schedule.name}: "
            + ", ".join(f"{count} {kind}" for (name, kind), count in sorted(by_kind.items()) if name == schedule.name)
            for schedule in self.schedules
        )
        return Invariant(
            "the run audit accounts once for every occurrence since the emulator started: succeeded, caught up within "
            "max_runs, or missed with the policy's reason",
            not wrong,
            "; ".join([found, *wrong[:3]]),
        )

    def _ran_once(self, rows: AuditRows, ledger: EffectsLedger) -> Invariant:
        """Read from the effects table: each succeeded row's job (each shard's) ran once; no missed one ran."""
        wrong = []
        for (name, moment, shard), (status, _) in rows.items():
            schedule = next(s for s in self.schedules if s.name == name)
            job_id = occurrence_job_id(Occurrence(name, moment, shard))
            effect = ledger.get(SCHEDULED_EFFECTS[schedule.job](job_id))
            ran = (effect.calls, effect.applied) if effect else (0, 0)
            if ran != ((1, 1) if status is RunStatus.SUCCEEDED else (0, 0)):
                wrong.append(f"{job_id} called {ran[0]}x, applied {ran[1]}x")
        succeeded = Counter(name for (name, _, _), (status, _) in rows.items() if status is RunStatus.SUCCEEDED)
        found = ", ".join(f"{count} {name} jobs applied once" for name, count in succeeded.items())
        return Invariant(
            "each occurrence's job ran once per shard, and no missed one ran (read from the effects table)",
            not wrong,
            "; ".join([found, *wrong[:3]]),
        )

    def _metric_matches(self, rows: AuditRows) -> Invariant:
        """The dead man's switch's metric, read back from the embedded CloudWatch: one per succeeded row."""
        succeeded = Counter(name for (name, _, _), (status, _) in rows.items() if status is RunStatus.SUCCEEDED)
        metric = {schedule.name: self._metric_sum(schedule.name) for schedule in self.schedules}
        return Invariant(
            f"{SCHEDULE_SUCCEEDED} (the dead man's switch's metric) counts every succeeded run once",
            metric == {schedule.name: succeeded[schedule.name] for schedule in self.schedules},
            ", ".join(f"{name} {value}" for name, value in metric.items()),
        )

    def _metric_sum(self, schedule: str) -> int:
        datapoints = self.runtime.cloudwatch.get_metric_statistics(
            Namespace=METRICS_NAMESPACE,
            MetricName=SCHEDULE_SUCCEEDED,
            Dimensions=[{"Name": SCHEDULE_DIMENSION, "Value": schedule}],
            StartTime=self._began - METRIC_MARGIN,
            EndTime=datetime.now(UTC) + METRIC_MARGIN,
            Period=int(METRIC_PERIOD.total_seconds()),
            Statistics=["Sum"],
        )["Datapoints"]
        return int(sum(point["Sum"] for point in datapoints))

    @staticmethod
    def _wait_for(condition: Callable[[], bool]) -> None:
        """Poll until ``condition`` holds or SCHEDULE_WAIT_S passed; if it never does, the invariants say why."""
        deadline = time.monotonic() + SCHEDULE_WAIT_S
        while not condition() and time.monotonic() < deadline:
            time.sleep(SCHEDULE_POLL_S)


class ExampleScenario:
    def __init__(self, jobs_per_type: int = JOBS_PER_TYPE) -> None:
        self.jobs_per_type = jobs_per_type
        self.plan = Plan()
        self.schedules = ScheduleDemo()
        self._runtime: LocalRuntime | None = None

    @property
    def runtime(self) -> LocalRuntime:
        assert self._runtime is not None, "produce has not run"
        return self._runtime

    @cached_property
    def ledger(self) -> EffectsLedger:
        return EffectsLedger(
            table_name=self.runtime.provisioned.tables[EFFECTS_TABLE.name], client=self.runtime.dynamodb
        )

    def produce(self, runtime: LocalRuntime) -> None:
        self._runtime = runtime
        self.schedules.produce(runtime)
        client = JobClient(
            runtime.topology,
            sqs_client=runtime.sqs,
            dynamodb_client=runtime.dynamodb,
            outbox_table=runtime.provisioned.outbox_table,
        )
        for example in EXAMPLES:
            requests, planned = self._requests(example)
            ids = client.enqueue_many(requests)
            for index, (job_id, plan) in enumerate(zip(ids, planned, strict=True)):
                if plan.deduped_at_enqueue:  # enqueued right after its original
                    self.plan.enqueue_duplicates += 1
                    self.plan.deduped_at_enqueue += job_id == ids[index - 1]
                else:
                    self.plan.expect_job(job_id, dead=plan.dead, duplicate=plan.duplicate)
        self._write_foreign_outbox_poison()
        self._place_orders(client)
        self._write_order_rows()
        self._send_duplicate_deliveries(runtime)
        self._send_legacy_messages(runtime)
        self._send_poison(runtime)
        self._await_relays()

    def _requests(self, example: "Example") -> tuple[list[JobRequest], list[Planned]]:
        """The example's jobs, every n-th with a fault, and some enqueued twice."""
        requests: list[JobRequest] = []
        planned: list[Planned] = []
        for i in range(self.jobs_per_type):
            if i % PERMANENT_EVERY == PERMANENT_AT:
                subject, dead = example.permanent + example.subject(i), Reason.PERMANENT_ERROR
            elif i % TRANSIENT_EVERY == TRANSIENT_AT:
                subject, dead = example.transient + example.subject(i), None
            else:
                subject, dead = example.subject(i), None
            request, effect_key = example.job(i, subject)
            self.plan.effects[effect_key] = 0 if dead else 1
            requests.append(request)
            planned.append(Planned(dead=dead))
            if i % DUPLICATE_EVERY == example.duplicate_at and not dead:
                requests.append(request)
                planned.append(Planned(duplicate=True, deduped_at_enqueue=request.dedupe_key is not None))
        return requests, planned

    def _place_orders(self, client: JobClient) -> None:
        """Each order's row and charge in one transaction; placing it again must fail and add no job."""
        table = self.runtime.provisioned.tables[ORDERS_TABLE.name]
        for i in range(TRANSACT_ORDERS):
            order = _order(Placed.TRANSACT, i)
            self.plan.expect_job(place_order(client, table, order))
            self.plan.orders[order.order_id] = Placed.TRANSACT
            if i % PLACE_AGAIN_EVERY == 0:
                self.plan.placed_again += 1
                try:
                    place_order(client, table, order)
                except TransactionConditionError:
                    self.plan.refused += 1

    def _write_order_rows(self) -> None:
        """Orders from a service that only writes rows: the stream rule makes their charges."""
        table = self.runtime.provisioned.tables[ORDERS_TABLE.name]
        for i in range(ROW_ONLY_ORDERS):
            order = _order(Placed.ROW_ONLY, i)
            self.runtime.dynamodb.put_item(TableName=table, Item=order.item(NEW))
            self.plan.orders[order.order_id] = Placed.ROW_ONLY

    def _write_foreign_outbox_poison(self) -> None:
        """A foreign producer's outbox item, written with plain boto3, whose envelope is a Map instead of JSON text.

        Attribute names are spelled out, as docs/outbox.md shows a producer without Conveyor writing them.
        """
        job_id = new_job_id()
        self.runtime.dynamodb.put_item(
            TableName=self.runtime.provisioned.outbox_table,
            Item={
                "id": {"S": job_id},
                "queue": {"S": "critical"},
                "envelope": {"M": {"type": {"S": "charge_order"}, "id": {"S": job_id}}},
                "created_at": {"S": datetime.now(UTC).isoformat()},
            },
        )
        self.plan.relay_dead_letters[Reason.INVALID_OUTBOX_ITEM.value] += 1

    def _await_relays(self) -> None:
        """Wait until every order is charged and the relay DLQ holds what it should, or RELAY_WAIT_S passed.

        Until produce returns the demo keeps waiting, and once it has, the queues being empty
        means the relayed work is done too; the invariants say what went wrong if time ran out.
        """
        pending = set(self.plan.orders)
        dead_letters = self.plan.relay_dead_letters.total()
        deadline = time.monotonic() + RELAY_WAIT_S
        while time.monotonic() < deadline:
            pending = {order_id for order_id in pending if not self.ledger.get(payments.effect_key(order_id))}
            relay_dlq = queue_depth(self.runtime.sqs, self.runtime.provisioned.relay_dlq_url)
            if not pending and relay_dlq.visible >= dead_letters:
                return
            time.sleep(RELAY_POLL_S)

    def _send_duplicate_deliveries(self, runtime: LocalRuntime) -> None:
        """The same body twice, as SQS's at-least-once delivery (or a redrive) may hand it over."""
        for i in range(DUPLICATE_DELIVERIES):
            user = f"twice-{i:02d}"
            body = _envelope("send_welcome_email", 2, {"user_id": user, "locale": "en"})
            self.plan.effects[email.effect_key(f"{user}@users.example", "welcome-en")] = 1
            self.plan.expect_job(json.loads(body)["id"])
            self.plan.duplicates += 1
            for _ in range(2):
                _send(runtime, "default", body)

    def _send_legacy_messages(self, runtime: LocalRuntime) -> None:
        """Version-1 welcome emails from an old producer, upcast by the worker."""
        for i in range(LEGACY_V1_MESSAGES):
            user = f"legacy-{i:02d}"
            body = _envelope("send_welcome_email", 1, {"user": user})
            self.plan.expect_job(json.loads(body)["id"])
            self.plan.effects[email.effect_key(f"{user}@users.example", "welcome-en")] = 1
            _send(runtime, "default", body)

    def _send_poison(self, runtime: LocalRuntime) -> None:
        poison = [
            ("default", "this is not JSON", Reason.INVALID_JSON),
            ("critical", json.dumps({"hello": "world"}), Reason.INVALID_ENVELOPE),
            ("bulk", _envelope("send_fax", 1, {"to": "+1"}), Reason.UNKNOWN_TYPE),
            ("bulk", _envelope("send_welcome_email", 2, {"user_id": "misrouted"}), Reason.UNKNOWN_TYPE),
            ("default", _envelope("send_welcome_email", 9, {"user_id": "future"}), Reason.UNSUPPORTED_VERSION),
            (
                "critical",
                _envelope("charge_order", 1, {"order_id": "o-bad", "amount_cents": "12", "currency": "EUR"}),
                Reason.INVALID_PAYLOAD,
            ),
        ]
        for queue, body, reason in poison:
            for _ in range(POISON_COPIES):
                _send(runtime, queue, body)
                self.plan.dead_letters[reason.value] += 1

    def check(self, observed: Observed) -> list[Invariant]:
        return [
            self._jobs_finished(observed),
            self._duplicates(observed),
            self._deduped_at_enqueue(),
            self._dead_letters(observed),
            self._effects(),
            self._orders_charged_once(),
            self._placements_refused(),
            self._relay_dead_letters(observed),
            *self.schedules.check(self.ledger),
        ]

    def _jobs_finished(self, observed: Observed) -> Invariant:
        finished = observed.final_kind_by_job()
        wrong = [
            f"{job_id}: wanted {want}, got {finished.get(job_id)}"
            for job_id, want in self.plan.finishes.items()
            if not _matches(want, finished.get(job_id))
        ]
        found = f"{len(self.plan.finishes) - len(wrong)} of {len(self.plan.finishes)} as planned"
        return Invariant("every job ran or was dead-lettered as planned", not wrong, "; ".join([found, *wrong[:3]]))

    def _duplicates(self, observed: Observed) -> Invariant:
        # At least the planned ones: a batch that ran past its timeout is redelivered whole, and
        # the jobs it had finished come back as duplicates too. That is at-least-once delivery.
        absorbed = sum(1 for outcome in observed.outcomes if outcome.kind is Kind.DUPLICATE)
        return Invariant(
            "duplicate enqueues and deliveries absorbed by idempotency",
            absorbed >= self.plan.duplicates,
            f"{absorbed} absorbed, {self.plan.duplicates} planned",
        )

    def _deduped_at_enqueue(self) -> Invariant:
        return Invariant(
            "duplicate enqueues with a dedupe key made no second job",
            self.plan.deduped_at_enqueue == self.plan.enqueue_duplicates > 0,
            f"{self.plan.deduped_at_enqueue} of {self.plan.enqueue_duplicates} got the first job's id back",
        )

    def _dead_letters(self, observed: Observed) -> Invariant:
        reasons = observed.dead_letter_reasons()
        return Invariant(
            "DLQs hold exactly the planned failures, each with its reason",
            reasons == self.plan.dead_letters,
            f"{sum(reasons.values())} entries" + ("" if reasons == self.plan.dead_letters else f", {dict(reasons)}"),
        )

    def _effects(self) -> Invariant:
        wrong = []
        for effect_key, planned in self.plan.effects.items():
            effect = self.ledger.get(effect_key)
            applied = effect.applied if effect else 0
            if applied != planned:
                wrong.append(f"{effect_key} applied {applied}x")
        once = sum(1 for planned in self.plan.effects.values() if planned)
        never = len(self.plan.effects) - once
        found = f"{once} applied exactly once, {never} never (dead-lettered); read from the table"
        return Invariant(
            f"effects in {naming.table_name(EFFECTS_TABLE.name)} happened exactly as often as planned",
            not wrong,
            "; ".join([found, *wrong[:3]]),
        )

    def _orders_charged_once(self) -> Invariant:
        """Read from both tables: every order row has one charge applied once, and no charge lacks its row."""
        table = self.runtime.provisioned.tables[ORDERS_TABLE.name]
        rows = {item[ORDER_ID]["S"] for item in self._scan(table)}
        charges = {
            item[KEY_ATTRIBUTE]["S"].removeprefix(CHARGE_KEY_PREFIX): int(item["applied"]["N"])
            for item in self._scan(self.runtime.provisioned.tables[EFFECTS_TABLE.name])
            if item[KEY_ATTRIBUTE]["S"].startswith(CHARGE_KEY_PREFIX + ORDER_ID_PREFIX) and "applied" in item
        }
        wrong = [
            f"order {order_id} charged {charges.get(order_id, 0)}x" for order_id in rows if charges.get(order_id) != 1
        ]
        wrong += [f"charge without an order: {order_id}" for order_id in charges.keys() - rows]
        wrong += [f"order {order_id} missing from {table}" for order_id in self.plan.orders.keys() - rows]
        placed = Counter(self.plan.orders.values())
        found = (
            f"{len(rows)} orders in {table} ({placed[Placed.TRANSACT]} {Placed.TRANSACT}, "
            f"{placed[Placed.ROW_ONLY]} {Placed.ROW_ONLY} and charged by stream rule {CHARGE_NEW_ORDERS.name!r}), "
            f"{sum(1 for applied in charges.values() if applied == 1)} charges applied once"
        )
        return Invariant("orders = charges: each order charged exactly once", not wrong, "; ".join([found, *wrong[:3]]))

    def _placements_refused(self) -> Invariant:
        """A refused placement wrote nothing: the outbox holds one item per placed order, plus the foreign one."""
        items = self.runtime.dynamodb.scan(
            TableName=self.runtime.provisioned.outbox_table, Select="COUNT", ConsistentRead=True
        )["Count"]
        planned = Counter(self.plan.orders.values())[Placed.TRANSACT] + self.plan.relay_dead_letters.total()
        return Invariant(
            "orders placed again are refused by their condition, adding no job",
            self.plan.refused == self.plan.placed_again and items == planned,
            f"{self.plan.refused} of {self.plan.placed_again} refused (TransactionConditionError); "
            f"the outbox holds {items} items, {planned} planned",
        )

    def _relay_dead_letters(self, observed: Observed) -> Invariant:
        reasons = observed.relay_dead_letter_reasons()
        return Invariant(
            "the relay DLQ holds exactly the planned poison records, each with its reason",
            reasons == self.plan.relay_dead_letters,
            ", ".join(f"{count} {reason}" for reason, count in reasons.items()) or "empty",
        )

    def _scan(self, table: str) -> list[dict[str, Any]]:
        pages = self.runtime.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
        return [item for page in pages for item in page["Items"]]


def _order(placed: Placed, i: int) -> Order:
    kind = "tx" if placed is Placed.TRANSACT else "row"
    return Order(order_id=f"{ORDER_ID_PREFIX}{kind}-{i:04d}", amount_cents=1000 + i, currency=ORDER_CURRENCY)


def _matches(wanted: Kind, got: Kind | None) -> bool:
    """A duplicate may also be the copy that ran (the other then being the duplicate)."""
    if wanted in (Kind.SUCCEEDED, Kind.DUPLICATE):
        return got in (Kind.SUCCEEDED, Kind.DUPLICATE)
    return got is wanted


def _envelope(job_type: str, version: int, data: dict[str, object]) -> str:
    return Envelope(type=job_type, v=version, id=new_job_id(), created_at=datetime.now(UTC), data=data).to_json()


def _send(runtime: LocalRuntime, queue: str, body: str) -> None:
    runtime.sqs.send_message(QueueUrl=runtime.provisioned.queues[queue].url, MessageBody=body)


@dataclass(frozen=True)
class Example:
    """One example job type in the scenario: its subjects, fault prefixes and request."""

    subject: Callable[[int], str]
    transient: str
    permanent: str
    duplicate_at: int
    job: Callable[[int, str], tuple[JobRequest, str]]


def _welcome(i: int, user: str) -> tuple[JobRequest, str]:
    request = JobRequest("send_welcome_email", {"user_id": user}, dedupe_key=f"welcome:{user}")
    return request, email.effect_key(f"{user}@users.example", "welcome-en")


def _charge(i: int, order: str) -> tuple[JobRequest, str]:
    # No dedupe key: the job type's key, "{order_id}#charge_v1", makes a second job for the
    # same order a duplicate, whoever enqueued it.
    request = JobRequest("charge_order", {"order_id": order, "amount_cents": 100 + i, "currency": "EUR"})
    return request, payments.effect_key(order)


def _webhook(i: int, path: str) -> tuple[JobRequest, str]:
    url, event_id = f"https://hooks.example/{path}", f"evt-{i:04d}"
    body = json.dumps({"event": "invoice.paid", "id": event_id})
    request = JobRequest("deliver_webhook", {"url": url, "event_id": event_id, "body": body}, dedupe_key=event_id)
    return request, webhooks.effect_key(url, event_id)


EXAMPLES = (
    Example(lambda i: f"u-{i:04d}", "flaky-1-", "bounce-", DUPLICATE_AT, _welcome),
    Example(lambda i: f"o-{i:04d}", "flaky-2-", "declined-", DUPLICATE_AT + 1, _charge),
    Example(lambda i: "acme", "flaky-1/", "status/404/", DUPLICATE_AT + 2, _webhook),
)
SCENARIO = ExampleScenario()
