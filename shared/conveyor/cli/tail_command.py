"""`conveyor tail`: follow job events as they happen, locally or in AWS, with one code path.

The local runtime ships its workers' log records to the embedded CloudWatch Logs as Lambda ships
a deployed worker's, so both are read with FilterLogEvents (conveyor.ops.tail).
"""

import json
import sys
import time
from datetime import UTC, datetime

import click
from rich.console import Console

from conveyor.cli.project import Project
from conveyor.cli.support import EXIT_INTERRUPTED, NotFound, aws_errors, log_format_option
from conveyor.contract import outputs
from conveyor.contract.durations import parse_duration
from conveyor.contract.errors import ContractError
from conveyor.local.console import PrettyConsole, resolve_log_format
from conveyor.ops.tail import TailFilter, follow

DEFAULT_SINCE = "10m"
# The pause between polls; a test replaces it with one that does not wait.
sleep = time.sleep


@click.command()
@click.option("--job", "job_id", default=None, metavar="ID", help="One job: its id, or the first characters of it.")
@click.option("--type", "job_type", default=None, metavar="TYPE", help="Only this job type.")
@click.option("--queue", default=None, help="Only this queue.")
@click.option(
    "--since", "since_text", default=DEFAULT_SINCE, show_default=True, help="Start this far back: 90s, 15m, 1h."
)
@log_format_option
@click.pass_obj
def tail(
    project: Project, job_id: str | None, job_type: str | None, queue: str | None, since_text: str, log_format: str
) -> None:
    """Follow job events (one per outcome: succeeded, retried, dead-lettered...) until Ctrl-C.

    Locally (AWS_ENDPOINT_URL set) from a running `conveyor local up`; in AWS from the workers'
    log groups, with a CloudWatch Logs filter pattern built from the options.
    """
    try:
        since = parse_duration(since_text)
    except ValueError as error:
        raise click.UsageError(f"--since {since_text!r}: {error}") from error
    if queue is not None:
        project.queue_name(queue)
    if job_type is not None:
        try:
            project.topology.job_type(job_type)
        except ContractError as error:
            raise NotFound(str(error)) from error
    target = project.target
    queues = [found for name, found in target.queues.items() if queue is None or name == queue]
    groups = [found.log_group for found in queues if found.log_group]
    if len(groups) < len(queues):
        raise NotFound(f"the stack has no {outputs.WORKER_LOG_GROUP} outputs; deploy this version of the stack")
    pretty = PrettyConsole(Console(highlight=False)) if resolve_log_format(log_format, sys.stdout) == "pretty" else None
    tail_filter = TailFilter(job_id=job_id, job_type=job_type, queue=queue)
    seen_any = waiting_said = False
    try:
        with aws_errors("following job events"):
            for events in follow(
                target.clients("logs"), groups, tail_filter, since=datetime.now(UTC) - since, sleep=sleep
            ):
                for record in events:
                    if pretty is not None:
                        pretty.record(record)
                    else:
                        click.echo(json.dumps(record))
                seen_any = seen_any or bool(events)
                if job_id and not seen_any and not waiting_said:
                    click.echo(f"conveyor: waiting for job {job_id}... (Ctrl-C to stop)", err=True)
                    waiting_said = True
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
