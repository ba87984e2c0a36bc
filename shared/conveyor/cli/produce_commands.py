"""`conveyor enqueue` and `conveyor backfill`: put jobs on their queues from the command line."""

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import boto3
import click

from conveyor.cli.project import Project
from conveyor.cli.support import Incomplete, NotFound, aws_errors, emit
from conveyor.contract import naming
from conveyor.contract.declarations import JobType
from conveyor.contract.durations import parse_duration
from conveyor.contract.errors import ContractError, EnqueueError, InvalidJobError
from conveyor.contract.topology import Topology
from conveyor.ops.backfill import (
    BackfillError,
    BackfillIncompleteError,
    InvalidBackfillError,
    parse_payload,
    plan_backfill,
)
from conveyor.ops.rate import parse_rate
from conveyor.sdk.client import JobClient
from conveyor.sdk.correlation import correlated

T = TypeVar("T")

# The envelope's correlation.origin: which tool put a job on its queue, for whoever reads its logs.
ENQUEUE_ORIGIN = "conveyor enqueue"
BACKFILL_ORIGIN = "conveyor backfill"


def _parsed(parse: Callable[[str], T]) -> Callable[[click.Context, click.Parameter, str | None], T | None]:
    """A click callback: the option's parsed value, or a one-line usage error naming the option."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> T | None:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as error:
            raise click.BadParameter(str(error), ctx=ctx, param=param) from error

    return callback


def _non_empty(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _job_type(topology: Topology, name: str) -> JobType[Any]:
    try:
        return topology.job_type(name)
    except ContractError as error:
        declared = ", ".join(job.name for job in topology.job_types)
        raise NotFound(f"{error}; declared: {declared}") from error


def _client(topology: Topology, job_type: JobType[Any]) -> JobClient:
    """A client for a queue known to exist, so a missing credential or queue is one line with its own exit code.

    The producer retries every send error, so it would report these late and without the distinction.
    """
    queue = topology.queue(job_type.queue)
    name = naming.queue_name(queue.name, fifo=queue.fifo)
    with aws_errors(f"finding queue {name}"):
        sqs = boto3.client("sqs")
        try:
            sqs.get_queue_url(QueueName=name)
        except sqs.exceptions.QueueDoesNotExist as error:
            raise NotFound(f"queue {name} does not exist; deploy the stack, or start `conveyor local up`") from error
    return JobClient(topology, sqs_client=sqs)


def _read_data(data: str) -> str:
    if not data.startswith("@"):
        return data
    try:
        return Path(data[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise click.UsageError(f"--data {data}: cannot read it ({error})") from error


@contextmanager
def _progress(shown: bool, length: int, label: str) -> Iterator[Callable[[int], None]]:
    """A progress bar for people, on stderr so that stdout keeps only the result."""
    if not shown:
        yield lambda _: None
        return
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        yield bar.update


@click.command()
@click.argument("job_type_name", metavar="TYPE")
@click.option("--data", required=True, metavar="JSON|@FILE", help="The payload: JSON, or @FILE to read it from FILE.")
@click.option(
    "--delay",
    callback=_parsed(parse_duration),
    metavar="DURATION",
    help="Hold the job back: 90s, 15m (SQS allows at most 15m).",
)
@click.option(
    "--dedupe-key",
    callback=_parsed(_non_empty),
    help="A second enqueue with this key, within the type's dedupe window, makes no job and prints the first's id.",
)
@click.option("--group", callback=_parsed(_non_empty), help="The message group, for a job type on a FIFO queue.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def enqueue(
    project: Project,
    job_type_name: str,
    data: str,
    delay: timedelta | None,
    dedupe_key: str | None,
    group: str | None,
    as_json: bool,
) -> None:
    """Validate one TYPE job against its payload model and enqueue it."""
    topology = project.topology
    job_type = _job_type(topology, job_type_name)
    try:
        payload = parse_payload(job_type, _read_data(data))
    except ContractError as error:
        raise click.UsageError(f"--data: {error}") from error
    client = _client(topology, job_type)
    try:
        with correlated(origin=ENQUEUE_ORIGIN):
            job_id = client.enqueue(job_type, payload, dedupe_key=dedupe_key, delay=delay, group=group)
    except InvalidJobError as error:
        raise click.UsageError(str(error)) from error
    except EnqueueError as error:
        raise click.ClickException(str(error)) from error
    emit(
        as_json,
        {"job_id": job_id, "job_type": job_type.name, "queue": job_type.queue},
        ("JOB ID", "JOB TYPE", "QUEUE"),
        [(job_id, job_type.name, job_type.queue)],
    )


@click.command()
@click.argument("job_type_name", metavar="TYPE")
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE.jsonl",
    help="One payload per line; blank lines are skipped.",
)
@click.option(
    "--rate", callback=_parsed(parse_rate), metavar="N/s", help="At most N jobs per second (5/s, 300/m, 1000/h)."
)
@click.option(
    "--checkpoint",
    "checkpoint_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where progress is kept (default: FILE.jsonl.checkpoint).",
)
@click.option("--restart", is_flag=True, help="Ignore the checkpoint and send the whole file again.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary, and no progress bar.")
@click.pass_obj
def backfill(
    project: Project,
    job_type_name: str,
    source: Path,
    rate: float | None,
    checkpoint_path: Path | None,
    restart: bool,
    as_json: bool,
) -> None:
    """Enqueue one TYPE job per line of a JSONL file: validated first, paced, resumable after a crash."""
    topology = project.topology
    job_type = _job_type(topology, job_type_name)
    try:
        plan = plan_backfill(topology, job_type, source, checkpoint_path=checkpoint_path, restart=restart)
        if plan.already_complete:
            summary = plan.summary(sent=0)
        else:
            client = _client(topology, job_type)
            with correlated(origin=BACKFILL_ORIGIN), _progress(not as_json, plan.remaining, job_type.name) as update:
                summary = plan.run(client, rate=rate, on_sent=update)
    except InvalidBackfillError as error:
        raise click.UsageError(str(error)) from error
    except BackfillIncompleteError as error:
        raise Incomplete(str(error)) from error
    except BackfillError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(asdict(summary), indent=2))
    elif plan.already_complete:
        click.echo(f"{source}: already complete, {summary.total_lines} {job_type.name} jobs ({plan.checkpoint_path})")
    else:
        click.echo(
            f"{source}: sent {summary.sent} {job_type.name} jobs ({summary.skipped_already_done} sent before); "
            f"all {summary.total_lines} done ({plan.checkpoint_path})"
        )
