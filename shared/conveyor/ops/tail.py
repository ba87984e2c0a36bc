"""Follow job events in the workers' log groups: CloudWatch Logs FilterLogEvents, paged and polled.

A job event is the one line the harness logs per outcome (it has an ``outcome`` field). The
options become a JSON filter pattern, so CloudWatch sends only matching events; the same filter
is applied again to what comes back, since moto (the local runtime's CloudWatch Logs) ignores
JSON patterns and returns every event. Following is polling: each poll asks for what was
logged since shortly before the newest event seen (events reach the log group a little out of
order) and drops the events it has already given.
"""

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# Each poll looks back this far behind the newest event seen, for events ingested late.
INGESTION_LAG = timedelta(seconds=30)
POLL_INTERVAL = timedelta(seconds=2)
MILLISECONDS = 1000


@dataclass(frozen=True)
class TailFilter:
    """Which job events to follow; ``job_id`` may be a prefix of the id (as the local console shows it)."""

    job_id: str | None = None
    job_type: str | None = None
    queue: str | None = None

    def pattern(self) -> str:
        """The filter as a CloudWatch Logs JSON filter pattern, e.g. ``{ $.outcome = * && $.job_id = "ab*" }``."""
        terms = ["$.outcome = *"]
        if self.job_id:
            terms.append(f"$.job_id = {json.dumps(self.job_id + '*')}")
        if self.job_type:
            terms.append(f"$.job_type = {json.dumps(self.job_type)}")
        if self.queue:
            terms.append(f"$.queue = {json.dumps(self.queue)}")
        return "{ " + " && ".join(terms) + " }"

    def matches(self, record: Mapping[str, Any]) -> bool:
        return (
            isinstance(record.get("outcome"), str)
            and (not self.job_id or str(record.get("job_id", "")).startswith(self.job_id))
            and (not self.job_type or record.get("job_type") == self.job_type)
            and (not self.queue or record.get("queue") == self.queue)
        )


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * MILLISECONDS)


def filtered_events(logs: Any, log_group: str, pattern: str, start_ms: int) -> Iterator[dict[str, Any]]:
    """Every event of ``log_group`` from ``start_ms`` on that matches ``pattern``, page by page (nextToken).

    A group that does not exist yet (no worker has logged to it) has no events.
    """
    request: dict[str, Any] = {"logGroupName": log_group, "filterPattern": pattern, "startTime": start_ms}
    while True:
        try:
            page = logs.filter_log_events(**request)
        except logs.exceptions.ResourceNotFoundException:
            return
        yield from page.get("events", [])
        if not page.get("nextToken"):
            return
        request["nextToken"] = page["nextToken"]


def follow(
    logs: Any,
    log_groups: Sequence[str],
    tail_filter: TailFilter,
    *,
    since: datetime,
    sleep: Callable[[float], None],
    poll_interval: timedelta = POLL_INTERVAL,
) -> Iterator[list[dict[str, Any]]]:
    """One list per poll, forever: the new matching job events (their records) in time order, maybe none.

    ``sleep`` waits ``poll_interval`` between polls (a test passes one that does not).
    """
    pattern = tail_filter.pattern()
    start_ms = _millis(since)
    seen: dict[str, int] = {}  # event id -> timestamp, for the events still inside the look-back
    while True:
        fresh = []
        for group in log_groups:
            for event in filtered_events(logs, group, pattern, start_ms):
                key = f"{group}/{event['eventId']}"
                if key in seen:
                    continue
                seen[key] = event["timestamp"]
                try:
                    record = json.loads(event["message"])
                except ValueError:
                    continue
                if isinstance(record, dict) and tail_filter.matches(record):
                    fresh.append((event["timestamp"], record))
        fresh.sort(key=lambda pair: pair[0])
        yield [record for _, record in fresh]
        if seen:
            start_ms = max(start_ms, max(seen.values()) - int(INGESTION_LAG.total_seconds() * MILLISECONDS))
            seen = {key: timestamp for key, timestamp in seen.items() if timestamp >= start_ms}
        sleep(poll_interval.total_seconds())
