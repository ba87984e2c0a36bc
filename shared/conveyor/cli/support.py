"""What every `conveyor` command shares: exit codes, one-line AWS errors, and table-or-JSON output.

Exit codes are part of the CLI's contract (scripts branch on them; docs/runbooks.md lists them).
"""

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as EndpointUnreachableError

from conveyor.local.console import AUTO, LOG_FORMAT_CHOICES
from conveyor.ops.dlq_scan import HoldLostError
from conveyor.ops.event_sources import EventSourceNotFoundError
from conveyor.ops.tables import render_table

T = TypeVar("T")

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_NO_CREDENTIALS = 4
EXIT_UNREACHABLE = 5
EXIT_AWS_ERROR = 6
# The operation ran but did not reach its goal: a canary failed, a drain timed out.
EXIT_INCOMPLETE = 7
# Stopped with Ctrl-C, as a shell reports it (128 + SIGINT).
EXIT_INTERRUPTED = 130

log_format_option = click.option(
    "--log-format",
    type=click.Choice(LOG_FORMAT_CHOICES),
    default=AUTO,
    show_default=True,
    help="pretty: one coloured line per job event; json: the workers' JSON lines; auto: pretty on a terminal.",
)


class NotFound(click.ClickException):
    """An unknown queue, job type, DLQ entry or stack."""

    exit_code = EXIT_NOT_FOUND


class Incomplete(click.ClickException):
    exit_code = EXIT_INCOMPLETE


class NoCredentials(click.ClickException):
    exit_code = EXIT_NO_CREDENTIALS


class Unreachable(click.ClickException):
    exit_code = EXIT_UNREACHABLE


class AwsError(click.ClickException):
    """AWS answered with an error: access denied, throttling, a missing resource."""

    exit_code = EXIT_AWS_ERROR


def user_input(parse: Callable[[], T]) -> T:
    """Run a parser of user input; its ValueError becomes one usage line (exit 2), LookupError exit 3."""
    try:
        return parse()
    except LookupError as error:
        raise NotFound(str(error.args[0] if error.args else error)) from error
    except ValueError as error:
        raise click.UsageError(str(error)) from error


@contextmanager
def aws_errors(doing: str) -> Iterator[None]:
    """Turn the SDK's errors into one line and an exit code that says which kind of problem it is."""
    try:
        yield
    except (NoCredentialsError, PartialCredentialsError) as error:
        raise NoCredentials(
            f"{doing}: no AWS credentials ({error}); configure a profile, or set AWS_ENDPOINT_URL for a local runtime"
        ) from error
    except NoRegionError as error:
        raise NoCredentials(f"{doing}: no AWS region; set AWS_DEFAULT_REGION or a region in your profile") from error
    except EndpointUnreachableError as error:
        raise Unreachable(f"{doing}: cannot reach {error.kwargs.get('endpoint_url', 'the endpoint')}") from error
    except EventSourceNotFoundError as error:
        raise NotFound(f"{doing}: {error}") from error
    except HoldLostError as error:
        raise Incomplete(f"{doing}: {error}") from error
    except ClientError as error:
        details = error.response.get("Error", {})
        raise AwsError(f"{doing}: {details.get('Code', 'error')}: {details.get('Message', error)}") from error
    except BotoCoreError as error:
        raise AwsError(f"{doing}: {error}") from error


def emit(as_json: bool, data: Any, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``data`` as JSON, or ``rows`` as a table for people."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        click.echo(render_table(headers, rows) if rows else "(none)")
