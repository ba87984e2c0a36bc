"""The workers' JSON log lines, made readable: one coloured line per job event, on a terminal.

The harness logs one line per outcome (conveyor.worker.harness ``_report``) with ``outcome``,
``queue``, ``job_type``, ``job_id``, ``attempt`` and, as they apply, ``duration_ms``, ``reason``,
``delay_s``, ``error_class``, ``error`` and ``exception`` (the masked traceback). This module reads
those fields back; it never parses the message text. Other JSON records (a job's own logging, the
harness's warnings) get a line of their own; anything else passes through as it came. EMF
documents are for the metrics sink (conveyor.local.emf), never the console: both formats drop them.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rich.console import Console
from rich.text import Text

from conveyor.local.emf import emf_document
from conveyor.local.text_sink import TextSink

LogFormat = Literal["pretty", "json"]
# `--log-format`: readable lines on a terminal, JSON lines elsewhere, unless one is asked for.
AUTO = "auto"
LOG_FORMAT_CHOICES = (AUTO, "pretty", "json")
# Powertools Logger's default timestamp, e.g. "2026-12-04 20:15:37,498+0000".
POWERTOOLS_TIMESTAMP = "%Y-%m-%d %H:%M:%S,%f%z"
JOB_ID_PREFIX = 8
OUTCOME_STYLES = {
    "succeeded": "green",
    "duplicate": "cyan",
    "retried": "yellow",
    "dead_lettered": "bold red",
    "snoozed": "blue",
    "deferred": "blue",
    "discarded": "magenta",
}
LEVEL_STYLES = {"DEBUG": "dim", "INFO": "", "WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red"}
OUTCOME_WIDTH = len("dead-lettered")
# Delays under a second are shown in milliseconds, from ten seconds on in whole seconds.
ROUND_SECONDS_FROM = 10
MILLISECONDS = 1000


def resolve_log_format(requested: str, out: TextSink) -> LogFormat:
    """``requested`` (one of LOG_FORMAT_CHOICES), with auto resolved by whether ``out`` is a terminal."""
    if requested == AUTO:
        return "pretty" if out.isatty() else "json"
    return "pretty" if requested == "pretty" else "json"


def log_record(line: str) -> dict[str, Any] | None:
    """A JSON log line as its record; None for anything else (a job's print(), say)."""
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _timestamp(record: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.strptime(str(record["timestamp"]), POWERTOOLS_TIMESTAMP)
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class JobEvent:
    """One outcome of one run, as the harness logged it."""

    outcome: str
    queue: str
    job_type: str | None
    job_id: str | None
    attempt: int
    time: datetime | None = None
    duration_ms: float | None = None
    reason: str | None = None
    delay_s: float | None = None
    error_class: str | None = None
    error: str | None = None
    exception: str | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> "JobEvent | None":
        """The job event a log record holds; None for a record that is not one."""
        if not isinstance(record.get("outcome"), str) or not isinstance(record.get("queue"), str):
            return None
        return cls(
            outcome=record["outcome"],
            queue=record["queue"],
            job_type=record.get("job_type"),
            job_id=record.get("job_id"),
            attempt=int(record.get("attempt") or 1),
            time=_timestamp(record),
            duration_ms=record.get("duration_ms"),
            reason=record.get("reason"),
            delay_s=record.get("delay_s"),
            error_class=record.get("error_class"),
            error=record.get("error"),
            exception=record.get("exception"),
        )


def _clock(moment: datetime | None) -> str:
    return moment.strftime("%H:%M:%S.%f")[:-3] if moment else "--:--:--.---"


def _seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * MILLISECONDS:.0f}ms"
    return f"{seconds:.1f}s" if seconds < ROUND_SECONDS_FROM else f"{seconds:.0f}s"


def event_line(event: JobEvent) -> Text:
    """time, queue, type, job id prefix, outcome, duration, then attempt, reason, error and delay as they apply."""
    line = Text(no_wrap=False)
    line.append(_clock(event.time), style="dim")
    line.append(f"  {event.queue:<10} {event.job_type or '<unreadable>':<22} ")
    line.append(f"{(event.job_id or '-')[:JOB_ID_PREFIX]:<{JOB_ID_PREFIX}}", style="dim")
    line.append(f"  {event.outcome.replace('_', '-'):<{OUTCOME_WIDTH}}", style=OUTCOME_STYLES.get(event.outcome, ""))
    line.append(f" {event.duration_ms:>9.1f}ms" if event.duration_ms is not None else " " * 12)
    if event.attempt > 1 or event.error:
        line.append(f"  attempt {event.attempt}")
    if event.reason:
        line.append(f"  {event.reason}", style="bold")
    if event.error:
        line.append(f"  {event.error_class}: {event.error}")
    if event.delay_s:
        line.append(f"  (again in {_seconds(event.delay_s)})", style="dim")
    return line


def record_line(record: Mapping[str, Any]) -> Text:
    """A log record that is not a job event: time, level and message."""
    level = str(record.get("level", "INFO"))
    line = Text(_clock(_timestamp(record)), style="dim")
    line.append(f"  {level:<8}", style=LEVEL_STYLES.get(level, ""))
    line.append(str(record.get("message", "")))
    if record.get("job_id"):
        line.append(f"  (job {str(record['job_id'])[:JOB_ID_PREFIX]})", style="dim")
    return line


class JsonConsole:
    """The workers' lines as they wrote them, but for EMF documents."""

    def __init__(self, out: TextSink) -> None:
        self._out = out

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if emf_document(line) is None:
                self._out.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()


class PrettyConsole:
    """A stdout for the workers that prints what they log the way a person reads it.

    Written whole lines at a time (the EMF forwarder in front of it splits them), from any thread:
    rich's Console serialises its own output.
    """

    def __init__(self, console: Console) -> None:
        self._console = console

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.show(line)
        return len(text)

    def flush(self) -> None:
        self._console.file.flush()

    def isatty(self) -> bool:
        return self._console.is_terminal

    def show(self, line: str) -> None:
        record = log_record(line)
        if record is None:
            self._console.print(Text(line), soft_wrap=True)
        elif emf_document(line) is None:
            self.record(record)

    def record(self, record: Mapping[str, Any]) -> None:
        event = JobEvent.of(record)
        self._console.print(event_line(event) if event else record_line(record), soft_wrap=True)
        trace = event.exception if event else record.get("exception")
        if trace:
            self._console.print(Text(str(trace), style="red"), soft_wrap=True)
