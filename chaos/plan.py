"""What a chaos run sends, and what must come of each job: the expectations the invariant checker holds it to.

Jobs of every example type the runtime can run unscheduled (welcome emails, charges, webhooks,
chunked reports), built with the demo scenario's own builders: every n-th carries a transient
fault (it must succeed after retries) or a permanent one (it must be dead-lettered with
``permanent_error``), some are enqueued twice (the second must be absorbed), and some are
delivered again as raw copies of their message, as SQS may (absorbed too). Each job names the
effect it must apply exactly once, and whether its provider honours an idempotency key.
"""

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

from conveyor.contract.reasons import Reason
from conveyor.sdk.prepare import JobRequest
from functions.jobs.charge_order import charge_order
from functions.jobs.generate_report import PROVIDER as REPORTS
from functions.jobs.generate_report import row_key
from functions.orders import Order
from functions.providers import email, payments, webhooks
from scenarios.demo import (
    DUPLICATE_EVERY,
    EXAMPLES,
    PERMANENT_AT,
    PERMANENT_EVERY,
    TRANSIENT_AT,
    TRANSIENT_EVERY,
    Example,
)

# A report's rows, each an effect; its chunks hand off between them (chaos.topology's short timeout).
REPORT_ROWS = 3
# Every n-th example job is a report.
REPORT_EVERY = 25
# Every n-th is an order placed through the outbox (JobClient.transact): the stream relay sends
# its charge, and the orders stream rule sends a second one for the same order, which idempotency absorbs.
ORDER_EVERY = 20
# Providers that apply an effect once per idempotency key, whatever the caller repeats.
DEDUPING_PROVIDERS = frozenset({payments.PROVIDER, REPORTS})
# Providers that do not (like most email and webhook receivers): a second call is a second effect.
NON_DEDUPING_PROVIDERS = frozenset({email.PROVIDER, webhooks.PROVIDER})


@dataclass(frozen=True)
class PlannedJob:
    """One request and what must come of it."""

    request: JobRequest
    # The effects it must apply exactly once (none if it must be dead-lettered).
    effects: tuple[str, ...]
    dead: Reason | None = None
    # A second enqueue of an earlier job: absorbed, no effect of its own.
    duplicate: bool = False
    # Placed through the outbox with its row, not sent to SQS by the producer.
    order: Order | None = None


def provider_of(effect_key: str) -> str:
    """``payments:charge:o-1`` -> ``payments``: the ledger's keys start with their provider."""
    return effect_key.split(":", 1)[0]


def planned_jobs(count: int, *, run: str) -> Iterator[PlannedJob]:
    """``count`` jobs round-robin over the example types; ``run`` keeps this run's subjects apart from any other's."""
    for i in range(count):
        if i % ORDER_EVERY == ORDER_EVERY - 1:
            order = Order(order_id=f"{run}-ord-{i:05d}", amount_cents=1000 + i, currency="EUR")
            # By name: chaos.topology's charge_order is a copy of the app's, with a shorter timeout.
            charge = replace(order.charge(), job=charge_order.name)
            yield PlannedJob(charge, (payments.effect_key(order.order_id),), order=order)
            continue
        if i % REPORT_EVERY == REPORT_EVERY - 1:
            report = f"{run}-r-{i:05d}"
            request = JobRequest("generate_report", {"report_id": report, "rows": REPORT_ROWS})
            yield PlannedJob(request, tuple(row_key(report, row) for row in range(REPORT_ROWS)))
            continue
        example = EXAMPLES[i % len(EXAMPLES)]
        n = i // len(EXAMPLES)
        yield from _example_jobs(example, n, run)


def _example_jobs(example: Example, n: int, run: str) -> Iterator[PlannedJob]:
    subject = f"{run}-{example.subject(n)}"
    dead = None
    if n % PERMANENT_EVERY == PERMANENT_AT:
        subject, dead = example.permanent + subject, Reason.PERMANENT_ERROR
    elif n % TRANSIENT_EVERY == TRANSIENT_AT:
        subject = example.transient + subject
    request, effect_key = example.job(n, subject)
    job = PlannedJob(request, () if dead else (effect_key,), dead)
    yield job
    if dead is None and n % DUPLICATE_EVERY == example.duplicate_at:
        yield PlannedJob(request, (), duplicate=True)


def redelivered(jobs: list[tuple[str, PlannedJob]], rate: float, rng: random.Random) -> list[tuple[str, PlannedJob]]:
    """The (job id, job) of the jobs to deliver again, as SQS may: a ``rate`` share, chosen by ``rng``."""
    return [job for job in jobs if rng.random() < rate]
