"""`conveyor`: the operator's command line. Every command prints a table, or JSON with --json."""

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import boto3
import click
from botocore.exceptions import BotoCoreError, ClientError

from conveyor.cli.cost_commands import cost
from conveyor.cli.init_command import init
from conveyor.cli.limits_commands import COMMANDS as LIMITS_COMMANDS
from conveyor.cli.local_commands import local
from conveyor.cli.ops_commands import COMMANDS
from conveyor.cli.produce_commands import backfill, enqueue
from conveyor.cli.project import Project
from conveyor.cli.reconcile_command import reconcile
from conveyor.cli.support import EXIT_INTERRUPTED
from conveyor.cli.tail_command import tail
from conveyor.contract.durations import format_duration, parse_duration
from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import TOPOLOGY_ENV
from conveyor.contract.outputs import STACK_NAME
from conveyor.contract.schema import envelope_schema
from conveyor.contract.topology import Topology
from conveyor.local.emf import RAW_VALUES_FILE
from conveyor.ops.stats import read_stats, render_stats
from conveyor.ops.tables import render_table
from conveyor.ops.target import STACK_ENV, is_local

# The command that rewrites a committed schema, named in the message of a failed --check.
REFRESH = "conveyor schema --output"


def _queue_rows(topology: Topology) -> list[dict[str, Any]]:
    return [
        {
            "name": queue.name,
            "fifo": queue.fifo,
            "job_types": [job.name for job in topology.job_types_on(queue.name)],
            "age_objective_s": queue.age_objective.total_seconds(),
            "batch_size": queue.batch_size,
            "batching_window_s": queue.batching_window.total_seconds(),
            "max_concurrency": queue.max_concurrency,
            "reserved_concurrency": queue.reserved_concurrency,
            "function_timeout_s": queue.function_timeout.total_seconds(),
            "visibility_timeout_s": queue.effective_visibility_timeout.total_seconds(),
            "retention_s": queue.retention.total_seconds(),
            "max_attempts": topology.max_attempts(queue.name),
            "max_receive_count": topology.max_receive_count(queue.name),
        }
        for queue in topology.queues
    ]


@click.group()
@click.option(
    "--topology",
    "topology_spec",
    envvar=TOPOLOGY_ENV,
    default=None,
    metavar="MODULE:ATTR",
    help=f"Where the declarations live (default: ${TOPOLOGY_ENV}, or [tool.conveyor] topology in pyproject.toml).",
)
@click.option(
    "--stack",
    envvar=STACK_ENV,
    default=None,
    help=f"The deployed stack to operate (default: ${STACK_ENV} or {STACK_NAME}); unused with $AWS_ENDPOINT_URL.",
)
@click.pass_context
def cli(ctx: click.Context, topology_spec: str | None, stack: str | None) -> None:
    """Operate Conveyor queues and jobs.

    Against AWS, resources are found through the stack's outputs; with AWS_ENDPOINT_URL set
    (a `conveyor local up`, say), through the declarations' fixed names on that endpoint.
    """
    ctx.obj = Project(topology_spec, stack)


cli.add_command(local)
for command in (*COMMANDS, *LIMITS_COMMANDS):
    cli.add_command(command)
cli.add_command(enqueue)
cli.add_command(backfill)
cli.add_command(cost)
cli.add_command(init)
cli.add_command(tail)
cli.add_command(reconcile)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def topology(project: Project, as_json: bool) -> None:
    """Show the declared queues, the job types routed to them and their derived settings, and the destinations."""
    declared = project.topology
    rows = _queue_rows(declared)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    headers = (
        "QUEUE",
        "JOB TYPES",
        "AGE SLO",
        "BATCH",
        "WINDOW",
        "CONC",
        "RESERVED",
        "TIMEOUT",
        "VISIBILITY",
        "ATTEMPTS",
        "REDRIVE AT",
    )
    table = [
        (
            queue.name + (" (fifo)" if queue.fifo else ""),
            ",".join(row["job_types"]) or "-",
            format_duration(queue.age_objective),
            str(queue.batch_size),
            format_duration(queue.batching_window),
            str(queue.max_concurrency),
            str(queue.reserved_concurrency or "-"),
            format_duration(queue.function_timeout),
            format_duration(queue.effective_visibility_timeout),
            str(row["max_attempts"]),
            str(row["max_receive_count"]),
        )
        for queue, row in zip(declared.queues, rows, strict=True)
    ]
    click.echo(render_table(headers, table))
    if declared.destinations:
        click.echo("")
        click.echo(
            render_table(
                ("DESTINATION", "LIMITS", "JOB TYPES"),
                [
                    (
                        destination.name,
                        destination.describe(),
                        ",".join(job.name for job in declared.job_types if destination.name in job.destinations) or "-",
                    )
                    for destination in declared.destinations
                ],
            )
        )


@cli.command()
@click.option("--output", type=click.File("w"), default="-", help="Write to FILE instead of stdout.")
@click.option(
    "--check",
    "committed",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Write nothing; fail with one line unless FILE is the schema of the current declarations.",
)
@click.pass_obj
def schema(project: Project, output: TextIO, committed: Path | None) -> None:
    """Print the JSON Schema of the envelope and every declared payload, or check a committed copy."""
    text = json.dumps(envelope_schema(project.topology), indent=2) + "\n"
    if committed is None:
        output.write(text)
        return
    if not committed.is_file():
        raise click.ClickException(f"{committed} does not exist; write it with `make schema` ({REFRESH} {committed})")
    if committed.read_text(encoding="utf-8") != text:
        raise click.ClickException(
            f"{committed} is stale: it is not the schema of the current declarations; refresh it with "
            f"`make schema` ({REFRESH} {committed})"
        )


@cli.command()
@click.argument("queue", required=False)
@click.option("--since", "since_text", default="1h", show_default=True, help="How far back: 90s, 15m, 1h, 2d.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def stats(project: Project, queue: str | None, since_text: str, as_json: bool) -> None:
    """Counts by outcome and reason, and enqueue-to-done percentiles, per job type."""
    topology = project.topology
    try:
        since = parse_duration(since_text)
        if queue is not None:
            topology.queue(queue)
    except (ValueError, DeclarationError) as error:
        raise click.UsageError(str(error)) from error
    end = datetime.now(UTC)
    try:
        found = read_stats(
            boto3.client("cloudwatch"),
            topology,
            start=end - since,
            end=end,
            queue=queue,
            # The local runtime's own record: on AWS, CloudWatch computes the percentiles.
            raw_values=RAW_VALUES_FILE if is_local() else None,
        )
    except (BotoCoreError, ClientError) as error:
        raise click.ClickException(f"cannot read metrics from CloudWatch: {error}") from error
    if as_json:
        click.echo(json.dumps([asdict(entry) for entry in found], indent=2))
    else:
        click.echo(render_stats(found))


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry: errors are one line on stderr and a non-zero exit, never a traceback."""
    # The project's declarations (functions.topology) live in the working directory.
    sys.path.insert(0, os.getcwd())
    try:
        cli.main(args=argv, prog_name="conveyor", standalone_mode=False)
    except click.ClickException as error:
        click.echo(f"conveyor: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except click.Abort:
        click.echo("conveyor: aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
