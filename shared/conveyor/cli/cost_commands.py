"""`conveyor cost`: the monthly AWS bill of a job mix, from measured requests per job and a dated price table.

The model is conveyor.ops.cost; this module reads the options, finds the profile and prints.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import click

from conveyor.cli.project import Project
from conveyor.cli.support import NotFound, aws_errors
from conveyor.contract import limits
from conveyor.contract.loader import nearest_pyproject
from conveyor.ops.cost import (
    Assumptions,
    CostInputError,
    UnknownJobTypeError,
    Workload,
    estimate,
    estimate_json,
    load_profile,
    observed_workload,
    parse_mix,
    render_estimate,
    workload,
)
from conveyor.ops.price_table import CostDataError, load_prices
from conveyor.ops.rate import parse_rate
from conveyor.ops.stats import read_stats

# Where `make bench` writes the profile, from the project root (the directory of its pyproject.toml).
DEFAULT_PROFILE = Path("bench") / "results.json"
OBSERVED_WINDOW = timedelta(hours=1)


@contextmanager
def _refused() -> Iterator[None]:
    """An unknown job type exits 3, other bad input 2 (a usage error), missing or bad data 1: one line each."""
    try:
        yield
    except UnknownJobTypeError as error:
        raise NotFound(str(error)) from error
    except CostInputError as error:
        raise click.UsageError(str(error)) from error
    except CostDataError as error:
        raise click.ClickException(str(error)) from error


def _default_profile() -> Path:
    pyproject = nearest_pyproject()
    if pyproject is None:
        raise CostDataError(f"no profile: no pyproject.toml from {Path.cwd()} up; pass --profile")
    return pyproject.parent / DEFAULT_PROFILE


def _workload(project: Project, rate: str | None, mix: str | None, observed: bool) -> Workload:
    if observed:
        if rate is not None or mix is not None:
            raise click.UsageError("pass --rate and --mix, or --observed, not both")
        end = datetime.now(UTC)
        with aws_errors("reading the last hour's job metrics"):
            found = read_stats(boto3.client("cloudwatch"), project.topology, start=end - OBSERVED_WINDOW, end=end)
        return observed_workload(found, OBSERVED_WINDOW)
    if rate is None or mix is None:
        raise click.UsageError("pass --rate and --mix (e.g. --rate 50/s --mix charge_order=0.2,...), or --observed")
    try:
        jobs_per_second = parse_rate(rate)
    except ValueError as error:
        raise CostInputError(str(error)) from error
    return workload(jobs_per_second, parse_mix(mix), project.topology)


@click.command()
@click.option("--rate", metavar="N/UNIT", help="Jobs per /s, /min, /h, /day or /month: 50/s, 1e9/month.")
@click.option("--mix", metavar="TYPE=SHARE,...", help="Each job type's share of the rate; the shares sum to 1.")
@click.option("--observed", is_flag=True, help="The last hour's rate and mix instead, as `conveyor stats` reads them.")
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Measured requests per job (default: {DEFAULT_PROFILE} in the project root, written by `make bench`).",
)
@click.option(
    "--prices",
    "prices_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A price table (default: the packaged us-east-1 table, conveyor/ops/prices/us-east-1.json).",
)
@click.option(
    "--message-bytes",
    type=click.IntRange(1, limits.SQS_MAX_MESSAGE_BYTES),
    default=Assumptions.message_bytes,
    show_default=True,
    help="The size of a job's message: SQS bills every 64 KB of a request's payload.",
)
@click.option(
    "--log-retention-days",
    type=click.IntRange(min=1),
    default=Assumptions.log_retention_days,
    show_default=True,
    help="How long the log groups keep logs (cdk.json's conveyor:log-retention).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_obj
def cost(
    project: Project,
    rate: str | None,
    mix: str | None,
    observed: bool,
    profile_path: Path | None,
    prices_path: Path | None,
    message_bytes: int,
    log_retention_days: int,
    as_json: bool,
) -> None:
    """Estimate the monthly AWS bill of a job mix, per job type and in total, with $ per million jobs.

    Requests per job come from the profile `make bench` measures; memory and queue types from the
    declarations; prices from a dated table. The footer states every assumption.
    """
    with _refused():
        load = _workload(project, rate, mix, observed)
        profile = load_profile(profile_path or _default_profile())
        prices = load_prices(prices_path)
        found = estimate(load, profile, project.topology, prices, Assumptions(message_bytes, log_retention_days))
    click.echo(json.dumps(estimate_json(found), indent=2) if as_json else render_estimate(found))
