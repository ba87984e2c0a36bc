"""Backfill: one job per line of a JSONL file, validated whole first, paced, and resumable.

The file is validated in one streaming pass before anything is sent. Jobs then go out in
batches; after each accepted batch a checkpoint records how many lines are done and a hash of
them, so a rerun resumes where the last run stopped and refuses a file whose done part changed.
A job's id derives from the job type, the line number and the line's payload: a line sent
twice (a crash between a send and its checkpoint) carries the same id both times, and the
worker's idempotency runs it once.
"""

import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, takewhile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conveyor.contract import limits
from conveyor.contract.declarations import JobType
from conveyor.contract.envelope import parse_json, summarize_validation_error
from conveyor.contract.errors import ContractError, ConveyorError, EnqueueError, InvalidJobError
from conveyor.contract.reasons import Reason
from conveyor.contract.topology import Topology
from conveyor.ops.rate import RateLimiter
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest

# Fixed for good: a new namespace would give every line of a resumed backfill a new id.
JOB_ID_NAMESPACE = uuid.UUID("5cad36c6-a27f-4c83-87f0-20d56416958b")
CHECKPOINT_SUFFIX = ".checkpoint"
# The hash of no lines at all: where a backfill that has sent nothing stands.
EMPTY_DIGEST = hashlib.sha256().hexdigest()


class BackfillError(ConveyorError):
    """A backfill stopped; the message says where and why in one line."""


class InvalidBackfillError(BackfillError):
    """Input refused before it was sent: a bad line, a changed file, someone else's checkpoint."""


class BackfillIncompleteError(BackfillError):
    """SQS did not accept some jobs; the checkpoint holds those before them, so a rerun resumes."""


class Checkpoint(BaseModel):
    """The first ``lines_done`` lines of ``file`` were sent as ``job_type`` jobs; ``sha256`` is their hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    job_type: str
    lines_done: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    complete: bool


@dataclass(frozen=True)
class BackfillSummary:
    """Counts are of lines that hold a job: blank lines are skipped and not counted."""

    job_type: str
    file: str
    sent: int
    skipped_already_done: int
    total_lines: int
    complete: bool


@dataclass(frozen=True)
class _Line:
    number: int
    text: str
    # The hash of lines 1..number.
    digest: str


@dataclass(frozen=True)
class _Job:
    line: _Line
    job_id: str
    payload: dict[str, Any]


def parse_payload(job_type: JobType[Any], text: str) -> dict[str, Any]:
    """The JSON object in ``text`` once it passes the job type's payload model; ContractError names the field."""
    try:
        document = parse_json(text)
    except ValueError as error:
        raise ContractError(Reason.INVALID_JSON, f"not JSON: {error}") from error
    if not isinstance(document, dict):
        raise ContractError(Reason.INVALID_PAYLOAD, f"a JSON {type(document).__name__}, not an object")
    job_type.load_payload(document, job_type.version)
    return document


def backfill_job_id(job_type: str, line_number: int, payload: Mapping[str, Any]) -> str:
    """The same id for the same line every time it is sent; the payload is hashed as canonical
    JSON, so reformatting the file (and sending it again with --restart) keeps the ids."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return str(uuid.uuid5(JOB_ID_NAMESPACE, f"{job_type}\n{line_number}\n{canonical}"))


def default_checkpoint(path: Path) -> Path:
    return path.with_name(path.name + CHECKPOINT_SUFFIX)


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InvalidBackfillError(f"checkpoint {path}: {error.strerror}") from error
    try:
        return Checkpoint.model_validate_json(text)
    except ValidationError as error:
        raise InvalidBackfillError(
            f"checkpoint {path} is not a backfill checkpoint ({summarize_validation_error(error)}); "
            "pass --restart to send the whole file again"
        ) from error


def batch_size_for(rate: float | None) -> int:
    """At most one second of jobs per batch, so a slow backfill sends steadily, not in bursts of 10."""
    if rate is None:
        return limits.SQS_MAX_BATCH_ENTRIES
    return max(1, min(limits.SQS_MAX_BATCH_ENTRIES, int(rate)))


@dataclass(frozen=True)
class Backfill:
    """A file validated for one job type, and where its checkpoint says the sending stands."""

    job_type: JobType[Any]
    path: Path
    checkpoint_path: Path
    resumed: bool
    lines_done: int
    # The hash of the first ``lines_done`` lines, and of the whole file, as validated.
    prefix_digest: str
    file_digest: str
    line_count: int
    jobs_done: int
    job_count: int

    @property
    def remaining(self) -> int:
        return self.job_count - self.jobs_done

    @property
    def already_complete(self) -> bool:
        return self.resumed and self.lines_done == self.line_count

    def summary(self, sent: int) -> BackfillSummary:
        return BackfillSummary(
            job_type=self.job_type.name,
            file=str(self.path),
            sent=sent,
            skipped_already_done=self.jobs_done,
            total_lines=self.job_count,
            complete=self.jobs_done + sent == self.job_count,
        )

    def run(
        self,
        client: JobClient,
        *,
        rate: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_sent: Callable[[int], None] = lambda _: None,
    ) -> BackfillSummary:
        """Send the lines after the checkpoint at ``rate`` jobs per second, checkpointing each batch."""
        limiter = RateLimiter(rate, clock=clock, sleep=sleep)
        # Written before anything is sent: a checkpoint that cannot be saved stops the run here.
        self._save(self.lines_done, self.prefix_digest)
        done, sent = self.lines_done, 0
        for batch in _batches(self._pending(limiter), batch_size_for(rate)):
            done = self._send(client, batch, done)
            sent += len(batch)
            on_sent(len(batch))
        if done < self.line_count:
            # Blank lines after the last job, or nothing left to send: the checkpoint must still say complete.
            self._save(self.line_count, self.file_digest)
        return self.summary(sent)

    def _pending(self, limiter: RateLimiter) -> Iterator[_Job]:
        """The jobs after the checkpoint, each released when the rate allows; only the lines validated,
        so a line appended since waits for the next run."""
        last_digest = EMPTY_DIGEST
        for line in islice(_read_lines(self.path), self.line_count):
            last_digest = line.digest
            if line.number == self.lines_done and line.digest != self.prefix_digest:
                raise _changed(self.path, self.lines_done)
            if line.number <= self.lines_done or not line.text.strip():
                continue
            payload = _line_payload(self.job_type, line)
            limiter.wait()
            yield _Job(line=line, job_id=backfill_job_id(self.job_type.name, line.number, payload), payload=payload)
        if last_digest != self.file_digest:
            raise InvalidBackfillError(f"{self.path} changed while it was being sent; run again to resume")

    def _send(self, client: JobClient, batch: Sequence[_Job], done: int) -> int:
        """Send one batch and checkpoint it; on a partial failure, checkpoint only its accepted head.

        ``done`` is the line the checkpoint is at before the batch; returns the line it is at after.
        """
        try:
            client.enqueue_many(JobRequest(self.job_type.name, job.payload, job_id=job.job_id) for job in batch)
        except InvalidJobError as error:
            raise InvalidBackfillError(
                f"lines {batch[0].line.number}-{batch[-1].line.number} were refused before sending: {error}"
            ) from error
        except EnqueueError as error:
            accepted = set(error.accepted)
            head = list(takewhile(lambda job: job.job_id in accepted, batch))
            if head:
                done = head[-1].line.number
                self._save(done, head[-1].line.digest)
            missing = [job for job in batch if job.job_id not in accepted]
            noun = "line" if len(missing) == 1 else "lines"
            raise BackfillIncompleteError(
                f"SQS did not accept {noun} {', '.join(str(job.line.number) for job in missing)} "
                f"({error.rejected.get(missing[0].job_id)}); the checkpoint is at line {done}: run again to resume"
            ) from error
        self._save(batch[-1].line.number, batch[-1].line.digest)
        return batch[-1].line.number

    def _save(self, lines_done: int, digest: str) -> None:
        checkpoint = Checkpoint(
            file=str(self.path.resolve()),
            job_type=self.job_type.name,
            lines_done=lines_done,
            sha256=digest,
            complete=lines_done == self.line_count,
        )
        try:
            _replace_file(self.checkpoint_path, checkpoint.model_dump_json(indent=2) + "\n")
        except OSError as error:
            raise BackfillError(f"cannot write checkpoint {self.checkpoint_path}: {error.strerror}") from error


def plan_backfill(
    topology: Topology,
    job_type: JobType[Any],
    path: Path,
    *,
    checkpoint_path: Path | None = None,
    restart: bool = False,
) -> Backfill:
    """Validate the lines still to send, in one streaming pass, against the job type and the checkpoint."""
    queue = topology.queue(job_type.queue)
    if queue.fifo:
        raise InvalidBackfillError(
            f"{job_type.name} runs on FIFO queue {queue.name!r}; backfill sends to standard queues only"
        )
    checkpoint_path = checkpoint_path or default_checkpoint(path)
    previous = None if restart else read_checkpoint(checkpoint_path)
    if previous is not None:
        _check_owner(previous, checkpoint_path, job_type, path)
    lines_done, prefix_digest = (previous.lines_done, previous.sha256) if previous else (0, EMPTY_DIGEST)
    file_digest = EMPTY_DIGEST
    line_count = jobs_done = job_count = 0
    for line in _read_lines(path):
        line_count, file_digest = line.number, line.digest
        if line.number == lines_done and line.digest != prefix_digest:
            raise _changed(path, lines_done)
        if not line.text.strip():
            continue
        job_count += 1
        if line.number <= lines_done:
            jobs_done += 1
            continue
        _line_payload(job_type, line)
    if line_count < lines_done:
        raise _changed(path, lines_done)
    return Backfill(
        job_type=job_type,
        path=path,
        checkpoint_path=checkpoint_path,
        resumed=previous is not None,
        lines_done=lines_done,
        prefix_digest=prefix_digest,
        file_digest=file_digest,
        line_count=line_count,
        jobs_done=jobs_done,
        job_count=job_count,
    )


def _line_payload(job_type: JobType[Any], line: _Line) -> dict[str, Any]:
    try:
        return parse_payload(job_type, line.text)
    except ContractError as error:
        raise InvalidBackfillError(f"line {line.number}: {error}") from error


def _batches(jobs: Iterator[_Job], size: int) -> Iterator[list[_Job]]:
    while batch := list(islice(jobs, size)):
        yield batch


def _check_owner(checkpoint: Checkpoint, checkpoint_path: Path, job_type: JobType[Any], path: Path) -> None:
    owner = (checkpoint.file, checkpoint.job_type)
    if owner != (str(path.resolve()), job_type.name):
        raise InvalidBackfillError(
            f"checkpoint {checkpoint_path} is for {checkpoint.job_type} jobs from {checkpoint.file}; "
            "pass another --checkpoint, or --restart to send the whole file again"
        )


def _changed(path: Path, lines_done: int) -> InvalidBackfillError:
    return InvalidBackfillError(
        f"{path}: the first {lines_done} lines changed since they were sent; "
        "pass --restart to send the whole file again"
    )


def _read_lines(path: Path) -> Iterator[_Line]:
    """The file's lines, numbered from 1, each with the hash of the file up to it.

    Line endings are left out of the hash, so a last line that gains a newline when more lines
    are appended still matches its checkpoint.
    """
    running = hashlib.sha256()
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            content = raw.removesuffix(b"\n").removesuffix(b"\r")
            running.update(content + b"\n")
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InvalidBackfillError(f"line {number}: not UTF-8 ({error.reason})") from error
            yield _Line(number=number, text=text, digest=running.hexdigest())


def _replace_file(path: Path, text: str) -> None:
    """Write beside ``path`` and rename over it: a crash leaves the old checkpoint or the new, never half."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
