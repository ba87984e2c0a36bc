"""`conveyor local ...`: run the platform on this machine, with moto as the embedded AWS."""

import os
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import cast

import click
from rich.console import Console

from conveyor.cli.project import Project
from conveyor.cli.support import log_format_option
from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import load_attribute, resolve, topology_spec
from conveyor.contract.topology import Topology
from conveyor.local.console import JsonConsole, PrettyConsole, resolve_log_format
from conveyor.local.demo import Scenario, run_demo
from conveyor.local.embedded import DEFAULT_PORT, EmbeddedAws, LocalRuntimeError, free_port
from conveyor.local.emf import RAW_VALUES_FILE
from conveyor.local.reload import Reloader, changes, watched_paths
from conveyor.local.runtime import LocalRuntime, local_environment
from conveyor.local.text_sink import TextSink

DEFAULT_GRACE_S = 30.0
STOP_CHECK_S = 0.2
# The project names its scenario as it names its topology (conveyor.contract.loader).
SCENARIO_ENV = "CONVEYOR_SCENARIO"
SCENARIO_KEY = "scenario"
DEMO_LOG = Path(".cache/demo/worker.log")


class _StopSignals:
    """Records SIGINT (Ctrl-C) and SIGTERM from the moment it is made, so none is missed at startup.

    The handler only appends to a list: it may interrupt the main thread anywhere, so it must
    not take a lock (an Event's, say) that the interrupted code could be holding. Python runs
    handlers on the main thread only, and a signal the kernel hands to a poller thread does not
    interrupt a sleep there, so ``wait`` wakes up regularly to let a pending handler run.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)

    def is_set(self) -> bool:
        """As a threading.Event's: what watchfiles checks to stop watching."""
        return bool(self.received)

    def wait(self) -> None:
        while not self.received:
            time.sleep(STOP_CHECK_S)


def _start_server(port: int, *, strict: bool = True) -> EmbeddedAws:
    server = EmbeddedAws(port, strict=strict)
    try:
        server.start()
    except LocalRuntimeError as error:
        raise click.ClickException(str(error)) from error
    return server


def _fresh(path: Path) -> Path:
    """A new embedded AWS has no metrics yet: start its raw values afresh too."""
    path.unlink(missing_ok=True)
    return path


def _console(requested: str) -> TextSink:
    """Where the workers' output goes: readable lines (on a terminal, or asked for) or their JSON lines."""
    if resolve_log_format(requested, sys.stdout) == "pretty":
        return PrettyConsole(Console(file=sys.stdout, highlight=False))
    return JsonConsole(sys.stdout)


def export_lines(endpoint_url: str) -> list[str]:
    """The shell lines that point another shell's boto3 (and `conveyor`) at this endpoint."""
    return [f"export {name}={shlex.quote(value)}" for name, value in local_environment(endpoint_url).items()]


def _run_until_stopped(
    topology: Topology,
    endpoint_url: str,
    grace: float,
    raw_values: Path,
    *,
    log_format: str,
    reload_spec: str | None = None,
) -> None:
    """Run the workers until SIGINT or SIGTERM; with ``reload_spec`` (the topology's), reload them on changes."""
    stop = _StopSignals()
    os.environ.update(local_environment(endpoint_url))
    runtime = LocalRuntime(topology, endpoint_url=endpoint_url)
    runtime.start(raw_values=raw_values, console=_console(log_format))
    click.echo(f"conveyor: workers running against {endpoint_url}", err=True)
    for name, queue in runtime.provisioned.queues.items():
        click.echo(f"  {name:<12} {queue.url}", err=True)
    click.echo("To use it from another shell (boto3, `conveyor status`, `conveyor tail`):", err=True)
    for line in export_lines(endpoint_url):
        click.echo(f"  {line}", err=True)
    if reload_spec is not None:
        paths = watched_paths(reload_spec)
        click.echo(f"conveyor: reloading the workers when {', '.join(map(str, paths))} changes", err=True)
        Reloader(runtime, reload_spec, grace_s=grace, say=lambda line: click.echo(line, err=True)).follow(
            changes(paths, stop)
        )
    stop.wait()
    click.echo(f"conveyor: draining (up to {grace:g}s for in-flight batches)", err=True)
    if not runtime.drain(grace):
        click.echo("conveyor: batches still running were left to return to their queues", err=True)


@click.group()
def local() -> None:
    """Run the declared platform on this machine: no AWS account, no Docker."""


@local.command()
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option("--grace", default=DEFAULT_GRACE_S, show_default=True, help="Seconds in-flight batches get on stop.")
@click.option(
    "--strict/--lenient",
    default=True,
    show_default=True,
    help="Refuse what AWS refuses (docs/local.md); --lenient lets moto accept it, as moto alone would.",
)
@click.option("--reload", is_flag=True, help="Restart the workers when the project's code changes (a dev server).")
@log_format_option
@click.pass_obj
def up(project: Project, port: int, grace: float, strict: bool, reload: bool, log_format: str) -> None:
    """Start moto on 127.0.0.1, provision the declared topology and run every queue's worker."""
    topology = project.topology
    reload_spec = topology_spec(project.topology_spec) if reload else None
    server = _start_server(port, strict=strict)
    try:
        raw_values = _fresh(RAW_VALUES_FILE)
        _run_until_stopped(
            topology, server.endpoint_url, grace, raw_values, log_format=log_format, reload_spec=reload_spec
        )
    finally:
        server.stop()


@local.command()
@click.option(
    "--scenario",
    default=None,
    metavar="MODULE:ATTR",
    help=f"The scenario to play (default: ${SCENARIO_ENV}, or scenario under [tool.conveyor] in pyproject.toml).",
)
@click.option("--port", default=0, help="Port for the embedded AWS (default: any free port).")
@click.pass_obj
def demo(project: Project, scenario: str | None, port: int) -> None:
    """Run the demo scenario end to end on a fresh local platform, then report and check it."""
    topology = project.topology
    try:
        scenario = resolve(SCENARIO_KEY, scenario, SCENARIO_ENV)
        loaded = load_attribute(scenario, "scenario")
    except DeclarationError as error:
        raise click.ClickException(str(error)) from error
    if not callable(getattr(loaded, "produce", None)) or not callable(getattr(loaded, "check", None)):
        raise click.ClickException(f"scenario {scenario!r}: needs produce(runtime) and check(observed)")
    server = _start_server(port or free_port())
    os.environ.update(local_environment(server.endpoint_url))
    click.echo(f"conveyor demo: embedded AWS at {server.endpoint_url}; scenario {scenario}")
    try:
        held = run_demo(
            lambda observed: LocalRuntime(topology, endpoint_url=server.endpoint_url, observer=observed.record),
            cast(Scenario, loaded),
            log_path=DEMO_LOG,
            raw_values=_fresh(RAW_VALUES_FILE),
        )
    finally:
        server.stop()
    if not held:
        raise click.ClickException("demo: invariants failed (see above)")


@local.command()
@click.option("--endpoint", required=True, metavar="URL", help="An AWS endpoint, e.g. a running `conveyor local up`.")
@click.option("--grace", default=DEFAULT_GRACE_S, show_default=True, help="Seconds in-flight batches get on stop.")
@log_format_option
@click.pass_obj
def work(project: Project, endpoint: str, grace: float, log_format: str) -> None:
    """Run every queue's worker against an existing endpoint (provisioning what is missing)."""
    _run_until_stopped(project.topology, endpoint, grace, RAW_VALUES_FILE, log_format=log_format)
