"""Pause markers in the run audit: what ``conveyor pause`` / ``resume`` of a queue tell its schedules.

A paused queue keeps receiving its scheduled jobs; a paused schedule (Scheduler's ``DISABLED``)
sends none. Either way the worker learns of the pause from the schedule's state item in the run
audit, which the missed-run accounting reads on every first attempt anyway: an occurrence that
fell due in a pause window is recorded ``missed`` with ``paused`` instead of the policy's reason
(and never caught up), and a scheduled job that waited out a queue's pause past its
``max_wall_time`` is let go as ``paused`` instead of dead-lettered. The format is
``conveyor.worker.schedule_runs``' (``ScheduleRuns.pause`` / ``resume``); only ops writes it.
"""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from conveyor.contract.topology import Topology
from conveyor.worker.schedule_runs import ScheduleRuns


class SchedulePauses:
    """Marks the pauses of a queue on the state items of the schedules whose jobs run on it."""

    def __init__(
        self, topology: Topology, dynamodb: Any, table_name: str, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._topology = topology
        self._clock = clock or (lambda: datetime.now(UTC))
        self._runs = ScheduleRuns(dynamodb, table_name, clock=self._clock)

    def schedules_on(self, queue: str) -> list[str]:
        """The schedules whose job runs on ``queue``."""
        return [s.name for s in self._topology.schedules if self._topology.job_type(s.job).queue == queue]

    def queue_paused(self, queue: str, *, until: datetime | None = None) -> list[str]:
        """Open a pause (ending by itself at ``until``, for a timed one) on each schedule of ``queue``; their names."""
        names = self.schedules_on(queue)
        now = self._clock()
        for name in names:
            self._runs.pause(name, now, until=until)
        return names

    def queue_resumed(self, queue: str) -> list[str]:
        """Close the open pause of each schedule of ``queue``; their names."""
        names = self.schedules_on(queue)
        now = self._clock()
        for name in names:
            self._runs.resume(name, now)
        return names
