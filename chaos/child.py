"""One generation of the chaos run's worker process: the local runtime with fault hooks installed.

``python -m chaos.child --endpoint URL --seed N --generation G --faults JSON --events PATH
[--topology MODULE:ATTR] [--grace S] [--raw-values PATH]`` runs every declared worker and
stream relay against the endpoint, as `conveyor local work` does (provisioning what is
missing), with chaos.faults installed before any AWS client exists. Its draws are seeded with
``"<seed>:<generation>"``, so a restarted child meets other faults than the one it replaces,
and a rerun of the same seed the same ones (as far as thread scheduling allows). Once running
it prints ``chaos child <G> ready``; on SIGTERM or SIGINT it drains for a few seconds and exits
0. A fault's crash exits with chaos.faults.CRASH_EXIT_CODE; a bad argument exits 2 with one line.
"""

import argparse
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import boto3

from chaos.faults import ChaosTables, FaultMix, install
from conveyor.cli.local_commands import _StopSignals
from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import load_topology
from conveyor.local.emf import RAW_VALUES_FILE
from conveyor.local.runtime import LocalRuntime, local_environment

DEFAULT_TOPOLOGY = "chaos.topology:TOPOLOGY"
# In-flight batches get this long on SIGTERM; the supervisor waits longer before it kills.
DEFAULT_GRACE_S = 5.0
READY = "chaos child {generation} ready"
# The run's metric values stay with its events, not in the checkout's .cache/local (`conveyor local`'s).
RAW_VALUES_NAME = RAW_VALUES_FILE.name
# The exit of a child that cannot run as asked: a bad argument, or a setup that would mislead.
USAGE_ERROR = 2
SETUP_ERROR = 1


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own prints the usage too
        self.exit(USAGE_ERROR, f"chaos child: {message}\n")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = _OneLineParser(prog="python -m chaos.child", description=__doc__)
    parser.add_argument("--endpoint", required=True, metavar="URL", help="the embedded AWS")
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--generation", required=True, type=int, help="which start of the child this is")
    parser.add_argument("--faults", required=True, metavar="JSON", help="FaultMix.to_json()")
    parser.add_argument("--events", required=True, type=Path, metavar="PATH", help="the faults' events file")
    parser.add_argument("--topology", default=DEFAULT_TOPOLOGY, metavar="MODULE:ATTR")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, help="seconds in-flight batches get on stop")
    parser.add_argument(
        "--raw-values",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"where the workers' metric values go (default: {RAW_VALUES_NAME} beside the events file)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    stop = _StopSignals()  # first: a SIGTERM during startup is kept, and ends the child once started
    options = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        mix = FaultMix.from_json(options.faults)
    except ValueError as error:
        return _fail(USAGE_ERROR, str(error))
    os.environ.update(local_environment(options.endpoint))
    try:
        topology = load_topology(options.topology)
    except DeclarationError as error:
        return _fail(USAGE_ERROR, str(error))
    if boto3.DEFAULT_SESSION is not None:
        # Its clients would not carry the hooks (botocore copies them when a session is made).
        return _fail(SETUP_ERROR, "a boto3 session was made before the fault hooks were installed")
    tables = ChaosTables.for_topology(topology)
    rng = random.Random(f"{options.seed}:{options.generation}")  # noqa: S311 - reproducible chaos, not secrets
    installation = install(mix, rng, options.events, tables)
    runtime = LocalRuntime(topology, endpoint_url=options.endpoint)
    runtime.start(raw_values=options.raw_values or options.events.parent / RAW_VALUES_NAME)
    if ChaosTables.of(runtime.provisioned) != tables:
        runtime.drain(options.grace)
        return _fail(SETUP_ERROR, f"the faults aim at {tables}, but the runtime provisioned {runtime.provisioned}")
    # Through the runtime's stdout (the EMF forwarder), whose lock keeps the line whole among log lines.
    sys.stdout.write(READY.format(generation=options.generation) + "\n")
    sys.stdout.flush()
    stop.wait()
    if not runtime.drain(options.grace):
        sys.stderr.write("chaos child: batches still running were left to return to their queues\n")
    # Hooks off before the interpreter exits: a daemon thread still calling AWS must not crash the exit.
    installation.uninstall()
    return 0


def _fail(code: int, message: str) -> int:
    sys.stderr.write(f"chaos child: {' '.join(message.split())}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
