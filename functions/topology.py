"""This project's queues and job types. The stack, the worker and the `jobs` CLI all read them.

Three queues keep unlike work apart: `critical` has its own reserved capacity and a tight
age objective, so a flood of `bulk` work can never delay a payment.
"""

from datetime import timedelta

from conveyor.declarations import JobType, Queue, RetryPolicy, Topology

TOPOLOGY = Topology(
    queues=(
        Queue("default", age_objective=timedelta(minutes=5), max_concurrency=5),
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
            batching_window=timedelta(seconds=30),
            max_concurrency=2,
        ),
    ),
    job_types=(
        JobType("send_welcome_email", queue="default"),
        JobType(
            "charge_order",
            queue="critical",
            retry=RetryPolicy(max_attempts=8, base=timedelta(seconds=1), cap=timedelta(minutes=5)),
            timeout=timedelta(seconds=10),
        ),
        JobType(
            "deliver_webhook",
            queue="bulk",
            retry=RetryPolicy(max_attempts=10, cap=timedelta(hours=1), max_wall_time=timedelta(hours=72)),
        ),
    ),
)
