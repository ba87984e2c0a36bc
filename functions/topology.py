"""This project's queues, job types and schedules. The stack, the worker and the `conveyor` CLI all read them.

The job types are every job a module of functions/jobs/ declares (discover_jobs): adding one
is adding its module. Three queues keep unlike work apart: `critical` has its own reserved
capacity and a tight age objective, so a flood of `bulk` work can never delay a payment. New
`orders` rows with status NEW are charged through a stream rule (functions/orders.py). Two
schedules run periodic work: a nightly report on the Kyiv clock that catches up at most two
missed nights, and an account sweep split into four shards that skips what it missed.
The three providers the jobs call are destinations whose limits every worker shares: the
payment gateway's per-currency rate, its error-rate breaker and a retry budget; the email
provider's rate; a cap on concurrent webhook deliveries and a breaker (docs/limits.md).
"""

from datetime import timedelta

from conveyor.contract.declarations import Queue
from conveyor.contract.destinations import Breaker, Destination, RateLimit
from conveyor.contract.discovery import discover_jobs
from conveyor.contract.schedules import Schedule, catch_up
from conveyor.contract.topology import Topology
from functions.jobs.summarize_day import summarize_day
from functions.jobs.sweep_accounts import sweep_accounts
from functions.orders import CHARGE_NEW_ORDERS, ORDERS_TABLE
from functions.providers.effects import EFFECTS_TABLE
from functions.providers.payments import reconcile_charge

NIGHTLY_REPORT = Schedule(
    "nightly-report",
    "cron(0 2 * * ? *)",
    job=summarize_day.name,
    payload={"report": "orders"},
    timezone="Europe/Kyiv",
    missed=catch_up(2),
)
SWEEP_ACCOUNTS = Schedule(
    "sweep-accounts",
    "cron(0 0/12 * * ? *)",
    job=sweep_accounts.name,
    flexible_window=timedelta(minutes=30),
    shards=4,
)

DESTINATIONS = (
    Destination(
        "payments",
        rate=RateLimit(50, per=timedelta(seconds=1), burst=10, key="currency"),
        # Open when half of at least 20 calls in a minute fail: the demo's 1-in-10 flaky charges never trip it.
        breaker=Breaker(error_rate=0.5, min_calls=20, window=timedelta(minutes=1), cool_down=timedelta(seconds=30)),
        retry_budget=0.5,
        # Charges are recorded in the effect ledger; the provider can say whether one with a given key happened.
        effects=("charge",),
        reconcile=reconcile_charge,
    ),
    # Mails are recorded too; an email provider cannot be asked about one, so a person checks its logs.
    Destination("email", rate=RateLimit(100, per=timedelta(seconds=1), burst=20), effects=("send",)),
    Destination(
        "webhooks",
        concurrency=5,
        breaker=Breaker(failures=50, window=timedelta(minutes=1), cool_down=timedelta(seconds=30)),
    ),
)

TOPOLOGY = Topology(
    queues=(
        # Behind its 5-minute objective, `default` doubles its concurrency up to 20; calm again, back to 5.
        Queue("default", age_objective=timedelta(minutes=5), max_concurrency=5, scale_on_age=True, scale_max=20),
        Queue(
            "critical",
            age_objective=timedelta(seconds=30),
            function_timeout=timedelta(seconds=20),
            max_concurrency=10,
            reserved_concurrency=10,
        ),
        Queue(
            "bulk",
            age_objective=timedelta(hours=1),
            function_timeout=timedelta(minutes=5),
            memory_mb=512,
            batch_size=100,
            batching_window=timedelta(seconds=5),
            max_concurrency=2,
        ),
    ),
    job_types=discover_jobs("functions.jobs"),
    tables=(EFFECTS_TABLE, ORDERS_TABLE),
    stream_rules=(CHARGE_NEW_ORDERS,),
    schedules=(NIGHTLY_REPORT, SWEEP_ACCOUNTS),
    destinations=DESTINATIONS,
)
