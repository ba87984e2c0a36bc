"""Row 2: requests per second the whole local topology makes with nothing queued.

The runtime runs every declared queue's pollers, every relayed stream's poller and the scheduler
emulator; after a warm-up (its start-up's provisioning and first polls are not idling), every
request its clients make is counted for the window, by operation and by queue or table.
"""

import time
from collections import Counter

from bench.counting import Counts, RequestCounter
from bench.figures import Figure, Row, Table, Target

KEY = "idle"
TITLE = "Idle requests per second, whole local topology, nothing queued"
TARGET = Target(1.0, on_ratio=False, unit="req/s")


def measure(counter: RequestCounter, *, window_s: float, warmup_s: float) -> Row:
    time.sleep(warmup_s)
    before = counter.snapshot()
    started = time.monotonic()
    time.sleep(window_s)
    counts = counter.since(before)
    return row(counts, time.monotonic() - started)


def row(counts: Counts, seconds: float) -> Row:
    by_operation: Counter[str] = Counter()
    for call, count in counts.items():
        by_operation[call.name] += count
    total = sum(counts.values())
    figure = Figure(f"requests per second over {seconds:.0f} s", total / seconds, "req/s", target=TARGET)
    operations = Table(
        "Idle requests per second by service.operation",
        ("request", "req/s"),
        tuple((name, f"{count / seconds:.2f}") for name, count in by_operation.most_common()),
    )
    resources = Table(
        "Idle requests per second by service.operation and queue or table",
        ("request", "queue or table", "req/s"),
        tuple(
            (call.name, call.resource or "-", f"{count / seconds:.2f}")
            for call, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        ),
    )
    notes = (
        "Every request of the runtime's clients (pollers, stream pollers, scheduler, event source state reads); "
        "not the embedded AWS's own SQS metrics publisher, which stands in for AWS.",
    )
    data = {"seconds": seconds, "requests": {f"{c.name} {c.resource}".strip(): n for c, n in sorted(counts.items())}}
    return Row(KEY, TITLE, (figure,), (operations, resources), notes, data=data)
