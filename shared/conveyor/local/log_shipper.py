"""Locally, what Lambda does with a worker's stdout: its log records reach CloudWatch Logs.

The shipper stands in the workers' output path behind the EMF forwarder: every line still goes
where it went, and each JSON record that names a queue (every line a job logs does, and the EMF
documents, as in AWS) is also put, about once a second, in that queue's worker log group on the
embedded AWS. So `conveyor tail`
reads job events with one code path, FilterLogEvents, locally as in AWS.
"""

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from conveyor.contract import limits
from conveyor.local.console import log_record
from conveyor.local.text_sink import TextSink

FLUSH_EVERY_S = 1.0
MILLISECONDS = 1000
STREAM = "local"

logger = logging.getLogger(__name__)

Event = dict[str, Any]


def batches(events: list[Event]) -> Iterator[list[Event]]:
    """``events`` cut into PutLogEvents batches, each within the call's count and byte limits."""
    batch: list[Event] = []
    size = 0
    for event in events:
        cost = len(event["message"].encode()) + limits.LOGS_EVENT_OVERHEAD_BYTES
        if batch and (len(batch) == limits.LOGS_MAX_BATCH_EVENTS or size + cost > limits.LOGS_MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(event)
        size += cost
    if batch:
        yield batch


class LogShipper:
    """A stdout that passes every line through and ships each queue's log records to its log group.

    ``log_groups`` maps a queue's name to its group; the groups (and one stream in each) are made
    by ``start``, or ``add_groups`` for queues added later. ``flush_logs`` ships what is pending:
    a thread calls it every ``FLUSH_EVERY_S``, and ``stop`` once more, so nothing logged is lost.
    """

    def __init__(self, passthrough: TextSink, logs: Any, log_groups: Mapping[str, str]) -> None:
        self._passthrough = passthrough
        self._logs = logs
        self._groups = dict(log_groups)
        self._pending: dict[str, list[Event]] = defaultdict(list)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)

    def start(self) -> None:
        self.add_groups(self._groups)
        self._thread.start()

    def add_groups(self, log_groups: Mapping[str, str]) -> None:
        """Ship these queues' records too (a reload may add queues), making any group or stream missing."""
        existing = {
            group["logGroupName"]
            for page in self._logs.get_paginator("describe_log_groups").paginate()
            for group in page["logGroups"]
        }
        for group in log_groups.values():
            if group not in existing:
                self._logs.create_log_group(logGroupName=group)
            streams = self._logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=STREAM)["logStreams"]
            if not any(stream["logStreamName"] == STREAM for stream in streams):
                self._logs.create_log_stream(logGroupName=group, logStreamName=STREAM)
        with self._lock:
            self._groups.update(log_groups)

    def write(self, text: str) -> int:
        self._passthrough.write(text)
        now = int(time.time() * MILLISECONDS)
        for line in text.splitlines():
            record = log_record(line)
            with self._lock:
                group = self._groups.get(str(record.get("queue"))) if record else None
                if group is not None:
                    self._pending[group].append({"timestamp": now, "message": line})
        return len(text)

    def flush(self) -> None:
        self._passthrough.flush()

    def isatty(self) -> bool:
        return self._passthrough.isatty()

    def flush_logs(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, defaultdict(list)
        for group, events in pending.items():
            for batch in batches(events):
                self._logs.put_log_events(logGroupName=group, logStreamName=STREAM, logEvents=batch)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._ship()

    def _run(self) -> None:
        while not self._stopping.wait(FLUSH_EVERY_S):
            self._ship()

    def _ship(self) -> None:
        try:
            self.flush_logs()
        except (BotoCoreError, ClientError) as error:  # the console still has them; only tail misses them
            logger.warning("could not ship worker logs to the embedded CloudWatch Logs: %s", error)
