"""`conveyor limits [set | clear]` and `conveyor breaker open | close`: the destinations' shared limits.

`limits` shows what the workers share right now; `set`, `clear`, `open` and `close` change it for
every worker within seconds, without a deploy, and each change is audited (`conveyor audit`).
"""

from datetime import timedelta

import click

from conveyor.cli.ops_commands import DASH, json_option
from conveyor.cli.project import Project
from conveyor.cli.support import NotFound, aws_errors, emit, user_input
from conveyor.contract.durations import format_duration, parse_duration
from conveyor.ops.limits import BudgetUse, Change, DestinationLimits, Limits, epoch_text
from conveyor.ops.tables import render_table
from conveyor.worker.destinations.breaker import BreakerState

# Marks a limit an operator overrode; the overrides table below the limits says how and why.
OVERRIDDEN = " *"
# What a change's table shows of the state before and after it, where they differ (its JSON has all of it).
CHANGE_ROWS = ("rate", "concurrency", "state", "open_until", "forced")


def _destination(project: Project, name: str) -> None:
    """Nothing if ``name`` is a declared destination; otherwise one line listing the declared ones (exit 3)."""
    declared = [destination.name for destination in project.topology.destinations]
    if name not in declared:
        raise NotFound(f"unknown destination {name!r}; declared: {', '.join(declared) or 'none'}")


def _budget(use: BudgetUse) -> str:
    counts = f"{_count(use.retries)} retries/{_count(use.first)} first"
    return f"{counts}, budget {use.budget:g} over {format_duration(use.window)}"


def _count(value: float) -> str:
    """A sliding window's count, which weighs the previous window's: to a tenth, 12 rather than 12.0."""
    return f"{value:.1f}".removesuffix(".0")


def _row(entry: DestinationLimits) -> tuple[str, ...]:
    rate, override = entry.effective.rate, entry.override
    if rate is None:
        tokens = DASH
    elif rate.key is not None:
        tokens = f"per {rate.key}"
    else:
        tokens = f"{entry.tokens:.1f}/{rate.burst}"
    breaker = DASH
    if entry.breaker is not None:
        status = entry.breaker
        breaker = status.state.value
        if status.open_until is not None and status.state is BreakerState.OPEN:
            breaker += f" until {epoch_text(status.open_until)}"
        if status.state is not BreakerState.CLOSED:
            breaker += f" ({'forced: ' if status.forced else ''}{status.reason})"
    return (
        entry.declared.name,
        (rate.describe() if rate else DASH) + (OVERRIDDEN if override and override.rate else ""),
        tokens,
        DASH
        if entry.effective.concurrency is None
        else f"{entry.slots_in_use}/{entry.effective.concurrency}"
        + (OVERRIDDEN if override and override.concurrency else ""),
        breaker,
        DASH if entry.budget is None else _budget(entry.budget),
    )


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def limits(ctx: click.Context, as_json: bool) -> None:
    """Each destination's limits as in force, tokens, slots in use, breaker and retry budget, live."""
    if ctx.invoked_subcommand is not None:
        return
    project: Project = ctx.obj
    target = project.target
    with aws_errors("reading the limits table"):
        report = Limits(target, project.topology).read()
    emit(
        as_json,
        report.as_dict(),
        ("DESTINATION", "RATE", "TOKENS", "SLOTS", "BREAKER", "RETRY BUDGET"),
        [_row(entry) for entry in report.destinations],
    )
    if as_json:
        return
    overridden = [(entry.declared, entry.override) for entry in report.destinations if entry.override is not None]
    if overridden:
        click.echo(f"\n{OVERRIDDEN.strip()} overridden (`conveyor limits clear NAME` restores the declaration):")
        click.echo(
            render_table(
                ("DESTINATION", "DECLARED", "SET BY", "SET AT", "REASON"),
                [
                    (
                        declared.name,
                        declared.describe(),
                        override.set_by,
                        epoch_text(override.set_at) or DASH,
                        override.reason or DASH,
                    )
                    for declared, override in overridden
                ],
            )
        )
    if report.queue_budgets:
        click.echo("")
        click.echo(
            render_table(
                ("QUEUE", "RETRY BUDGET"),
                [(use.scope.partition(":")[2], _budget(use)) for use in report.queue_budgets],
            )
        )


def _cell(value: object) -> str:
    return DASH if value is None else str(value)


def _emit_change(change: Change, as_json: bool) -> None:
    emit(
        as_json,
        change.as_dict(),
        ("DESTINATION", change.destination),
        [
            ("action", change.action),
            *(
                (key, f"{_cell(change.before.get(key))} -> {_cell(value)}")
                for key, value in change.after.items()
                if key in CHANGE_ROWS and change.before.get(key) != value
            ),
            ("audit_id", change.audit_id),
        ],
    )


@limits.command("set")
@click.argument("name")
@click.option("--rate", "rate_text", help="Calls per s, min or h: 20/s, 600/min (a per-key limit stays per key).")
@click.option("--burst", type=int, help="Calls at once over the rate (default: the burst in force).")
@click.option("--concurrency", type=int, help="Calls in flight at once, over every worker.")
@click.option("--reason", required=True, help="Why (recorded in the audit).")
@json_option
@click.pass_obj
def limits_set(
    project: Project,
    name: str,
    rate_text: str | None,
    burst: int | None,
    concurrency: int | None,
    reason: str,
    as_json: bool,
) -> None:
    """Override a destination's rate, burst or concurrency for every worker (within seconds, no deploy)."""
    _destination(project, name)
    if rate_text is None and burst is None and concurrency is None:
        raise click.UsageError(
            "give --rate, --burst or --concurrency (`conveyor limits clear` restores the declaration)"
        )
    target = project.target
    with aws_errors(f"overriding the limits of {name!r}"):
        change = user_input(
            lambda: Limits(target, project.topology).set_limits(
                name, rate=rate_text, burst=burst, concurrency=concurrency, reason=reason
            )
        )
    _emit_change(change, as_json)


@limits.command("clear")
@click.argument("name")
@click.option("--reason", required=True, help="Why (recorded in the audit).")
@json_option
@click.pass_obj
def limits_clear(project: Project, name: str, reason: str, as_json: bool) -> None:
    """Remove a destination's override: its declared limits apply again."""
    _destination(project, name)
    target = project.target
    with aws_errors(f"clearing the override of {name!r}"):
        change = Limits(target, project.topology).clear_limits(name, reason=reason)
    _emit_change(change, as_json)


@click.group()
def breaker() -> None:
    """Hold a destination's breaker open (stop calling it), or close it again."""


def _force(
    project: Project, name: str, state: BreakerState, reason: str, for_: timedelta | None, as_json: bool
) -> None:
    _destination(project, name)
    target = project.target
    with aws_errors(f"forcing the breaker of {name!r} {state.value}"):
        change = user_input(lambda: Limits(target, project.topology).set_breaker(name, state, reason=reason, for_=for_))
    _emit_change(change, as_json)


@breaker.command("open")
@click.argument("name")
@click.option("--reason", required=True, help="Why (recorded in the audit).")
@click.option(
    "--for",
    "for_text",
    help="Probe the destination again after this long (90s, 10m, 1h); else open until `breaker close`.",
)
@json_option
@click.pass_obj
def breaker_open(project: Project, name: str, reason: str, for_text: str | None, as_json: bool) -> None:
    """Open a destination's breaker: jobs that call it are snoozed, not run."""
    for_ = None if for_text is None else user_input(lambda: parse_duration(for_text))
    _force(project, name, BreakerState.OPEN, reason, for_, as_json)


@breaker.command("close")
@click.argument("name")
@click.option("--reason", required=True, help="Why (recorded in the audit).")
@json_option
@click.pass_obj
def breaker_close(project: Project, name: str, reason: str, as_json: bool) -> None:
    """Close a destination's breaker: calls go through again, and its failures count from zero."""
    _force(project, name, BreakerState.CLOSED, reason, None, as_json)


COMMANDS = (limits, breaker)
