"""`conveyor reconcile`: effects recorded as intended and never confirmed, and what to check at the provider."""

import click

from conveyor.cli.ops_commands import DASH, json_option
from conveyor.cli.project import Project
from conveyor.cli.support import NotFound, aws_errors, emit, user_input
from conveyor.contract.durations import format_duration, parse_duration
from conveyor.contract.effects import summary_json
from conveyor.ops.reconcile import GRACE, Finding, Reconciliation, Report, what_to_check

HEADERS = ("EFFECT", "KEY", "JOB ID", "JOB TYPE", "ATTEMPT", "INTENDED AT", "REQUEST")


def _row(finding: Finding, settling: bool) -> tuple[str, ...]:
    record = finding.as_dict()
    row = (
        record["effect"],
        record["key"],
        record["job_id"],
        record["job_type"],
        str(record["attempt"]),
        record["intended_at"],
        summary_json(finding.record.request) or DASH,
    )
    if not settling:
        return row
    verdict = finding.hook_error or (finding.verdict.value if finding.verdict else "no hook")
    if finding.verdict is not None and finding.hook_error is None and not finding.settled:
        verdict += " (not recorded: the effect moved on)"
    return (*row, verdict)


@click.command()
@click.option(
    "--effect",
    "effects",
    multiple=True,
    metavar="DESTINATION.OPERATION",
    help="A declared effect (payments.charge); repeat for more. Default: every declared effect.",
)
@click.option("--since", "since_text", default="24h", show_default=True, help="How far back: 90s, 15m, 1h, 2d.")
@click.option(
    "--confirm",
    "settle",
    is_flag=True,
    help="Ask each destination's reconcile hook about each finding and record its answer (audited).",
)
@json_option
@click.pass_obj
def reconcile(project: Project, effects: tuple[str, ...], since_text: str, settle: bool, as_json: bool) -> None:
    """Effects intended but not confirmed (a crash between the call and its record), older than the grace period."""
    since = user_input(lambda: parse_duration(since_text))
    names = effects or project.topology.effect_names()
    declared = project.topology.effect_names()
    for name in names:
        if name not in declared:
            raise NotFound(f"unknown effect {name!r}; declared: {', '.join(declared) or 'none'}")
    reconciliation = Reconciliation(project.target, project.topology)
    with aws_errors("reading the effect ledger"):
        report = reconciliation.settle(names, since=since) if settle else reconciliation.find(names, since=since)
    _emit(report, settle, as_json)


def _emit(report: Report, settling: bool, as_json: bool) -> None:
    headers = (*HEADERS, "VERDICT") if settling else HEADERS
    emit(as_json, report.as_dict(), headers, [_row(finding, settling) for finding in report.findings])
    if as_json:
        return
    summary = report.as_dict()
    window = f"intended between {summary['intended_after']} and {summary['intended_before']}"
    grace = f"a younger intent may belong to a run still going: a run lasts at most {format_duration(GRACE)}"
    settled = "".join(f", {count} {verdict}" for verdict, count in report.counts.items())
    click.echo(f"\n{len(report.findings)} unconfirmed{settled}, {window} ({grace})")
    for finding in report.findings:
        if not finding.settled:
            click.echo(f"- {finding.record.name} {finding.record.key}: {what_to_check(finding.record)}")
    if report.without_hook:
        click.echo(f"no reconcile hook (check by hand): {', '.join(report.without_hook)}")
    if report.audit_id:
        click.echo(f"audit: {report.audit_id}")
