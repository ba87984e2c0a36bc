"""The age controller in the local runtime: conveyor.worker.scale_on_age's, on the local mappings and clock.

The decision, the CloudWatch reading and the audit rows are the Lambda controller's own. What differs
is where the mappings live (the local event sources table, which has no last-modified time: changes
are dated when this process makes or first sees them) and what runs it (a thread every
``PERIOD`` instead of an EventBridge rule). The ages come from the embedded CloudWatch, where the
embedded AWS publishes ApproximateAgeOfOldestMessage every minute (conveyor.local.sqs_metrics).
"""

import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from conveyor.contract import naming
from conveyor.contract.topology import Topology
from conveyor.local.periodic import Periodic
from conveyor.ops.event_sources import LocalEventSources
from conveyor.worker.audit import AuditWriter
from conveyor.worker.scale_on_age import ACTOR, PERIOD, AgeScaler, MappingState, read_ages

log = logging.getLogger(__name__)


class LocalMappings:
    """The local mappings, each dated by the last change this process made or saw between two reads.

    A mapping is dated when first read, too: a runtime that just started waits a cool-down before a step down.
    """

    def __init__(self, event_sources: LocalEventSources, clock: Callable[[], datetime]) -> None:
        self._sources = event_sources
        self._clock = clock
        self._seen: dict[str, tuple[bool, int | None]] = {}
        self._changed_at: dict[str, datetime] = {}

    def read(self, queue: str) -> MappingState:
        state = self._sources.state(queue)
        seen = (state.enabled, state.max_concurrency)
        if self._seen.get(queue) != seen:
            self._seen[queue] = seen
            self._changed_at[queue] = self._clock()
        return MappingState(state.enabled, state.max_concurrency, self._changed_at[queue])

    def set_max_concurrency(self, queue: str, value: int) -> None:
        self._sources.set_max_concurrency(queue, value)
        self._seen[queue] = (True, value)
        self._changed_at[queue] = self._clock()


def local_scaler(
    topology: Topology,
    *,
    dynamodb: Any,
    cloudwatch: Any,
    event_sources: LocalEventSources,
    clock: Callable[[], datetime],
) -> AgeScaler:
    """The controller for ``topology``'s local queues: their fixed names, the local audit table, ``clock``."""
    names = {q.name: naming.queue_name(q.name, fifo=q.fifo) for q in topology.queues if q.scale_on_age}
    return AgeScaler(
        topology,
        ages=partial(read_ages, cloudwatch, names),
        mappings=LocalMappings(event_sources, clock),
        audit=AuditWriter(dynamodb, naming.table_name(naming.AUDIT_TABLE), actor=ACTOR, clock=clock),
        clock=clock,
    )


class ScaleLoop(Periodic):
    """Runs the controller every ``period_s`` in a thread, as the EventBridge rule runs its function every minute."""

    def __init__(self, scaler: AgeScaler, *, period_s: float = PERIOD.total_seconds()) -> None:
        self.scaler = scaler
        self._period_s = period_s
        super().__init__(self._tick, period_s=period_s, name="scale-on-age")

    def _tick(self) -> None:
        try:
            self.scaler.tick()
        except Exception:  # a failed run is retried on the next period, as the rule's next invocation would
            log.exception("the age controller's run failed; running again in %ss", self._period_s)
