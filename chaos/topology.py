"""The example app's topology (functions/topology.py) with timeouts short enough for a chaos run.

The same queues, job types, tables and stream rules, so the run exercises the code that ships.
What changes is time: a SIGKILLed or crashed worker leaves its received messages invisible for
the queue's visibility timeout (6 x the function timeout, conveyor.contract.declarations.Queue),
and a run that waits five minutes per kill measures nothing but waiting. With these timeouts a
crashed child's in-flight messages come back within two minutes (120 s; 180 s on ``bulk``).

The destinations keep their rate limits, caps and breakers, but not their retry budgets: the run
injects transient failures at rates a budget exists to refuse, and its invariants expect every
planned job to end as planned, not dead-lettered ``retry_budget_exhausted``.
"""

from dataclasses import replace
from datetime import timedelta
from typing import Any

from conveyor.contract.declarations import JobType, Queue
from conveyor.contract.topology import Topology
from functions.topology import TOPOLOGY as APP_TOPOLOGY

# default (30 s) and critical (20 s): visibility 120 s. Not shorter: on 2 cores the embedded AWS
# answers slowly under a chaos run's load, and a job starts only while its whole timeout fits in
# what the invocation has left, so a tighter budget defers most of every batch (a re-send each).
FUNCTION_TIMEOUT = timedelta(seconds=20)
# bulk (5 min): a batch of up to 100 records (batch_size) plus a 10 s report chunk must fit in
# one invocation, so bulk keeps more; visibility 180 s.
BULK_FUNCTION_TIMEOUT = timedelta(seconds=30)
FUNCTION_TIMEOUTS = {"default": FUNCTION_TIMEOUT, "critical": FUNCTION_TIMEOUT, "bulk": BULK_FUNCTION_TIMEOUT}

# The harness starts a job only if its whole timeout still fits in what the invocation has left
# (less a reserve; Invocation.budget_for), else defers it with a re-send. A job timeout equal to
# the function timeout would run first in its batch only and re-send the rest every time, so
# each keeps the share of its function timeout it has in the app, not just "no more than it":
JOB_TIMEOUTS = {
    # 10 s of critical's 20 s in the app: a quarter of it here.
    "charge_order": timedelta(seconds=5),
    # 15 s of bulk's 5 min in the app; a sixth of bulk's 30 s here.
    "deliver_webhook": timedelta(seconds=5),
    # 4 min of bulk's 5 min in the app. Its chunks hand off once under HANDOFF_RESERVE (15 s) is
    # left, which with 10 s is at once: every chunk does one row and hands the rest on, so a
    # chaos run exercises checkpoints and hand-offs on every report.
    "generate_report": timedelta(seconds=10),
}


def _queue(queue: Queue) -> Queue:
    # visibility_timeout is not declared by the app, so it follows: 6 x the new function timeout.
    # A queue the app adds later gets FUNCTION_TIMEOUT, never a longer timeout than its own.
    timeout = min(queue.function_timeout, FUNCTION_TIMEOUTS.get(queue.name, FUNCTION_TIMEOUT))
    return replace(queue, function_timeout=timeout)


def _job_type(job_type: JobType[Any]) -> JobType[Any]:
    timeout = JOB_TIMEOUTS.get(job_type.name)
    return job_type if timeout is None else replace(job_type, timeout=timeout)


TOPOLOGY = Topology(
    queues=tuple(_queue(queue) for queue in APP_TOPOLOGY.queues),
    job_types=tuple(_job_type(job_type) for job_type in APP_TOPOLOGY.job_types),
    tables=APP_TOPOLOGY.tables,
    stream_rules=APP_TOPOLOGY.stream_rules,
    destinations=tuple(replace(destination, retry_budget=None) for destination in APP_TOPOLOGY.destinations),
    # No schedules: the local scheduler would fire them on the wall clock, adding jobs the run's
    # plan does not list at moments no seed decides; the scheduled job types stay, producible by hand.
    schedules=(),
)
