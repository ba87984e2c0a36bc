"""`python -m bench` (`make bench`): measure Conveyor against anchors run beside it, write the report and results.

Writes docs/benchmarks.md and bench/results.json, or ``benchmarks.md`` and ``results.json`` in
``--output-dir``. ``--quick`` runs tiny sizes (seconds, not minutes), for checking the suite runs.
A row that cannot run here (Celery not installed, the embedded AWS unable to start) is skipped
with its reason in the report. Bad arguments end with one line and exit status 2.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report import render
from bench.suite import FULL, QUICK, run

REPORT = Path("docs/benchmarks.md")
RESULTS = Path("bench/results.json")
USAGE_ERROR = 2


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own is usage + message; keep the message
        self.exit(USAGE_ERROR, f"bench: {message}\n")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = _OneLineParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and a short idle window")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"write benchmarks.md and results.json here (default: {REPORT} and {RESULTS})",
    )
    options = parser.parse_args(argv)
    if options.output_dir is not None and options.output_dir.exists() and not options.output_dir.is_dir():
        parser.error(f"--output-dir {options.output_dir} is not a directory")
    return options


def _progress(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)  # noqa: T201


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    options = parse(arguments)
    folder: Path | None = options.output_dir
    report, results_path = (folder / REPORT.name, folder / RESULTS.name) if folder else (REPORT, RESULTS)
    command = " ".join(["python -m bench", *arguments])
    results = run(QUICK if options.quick else FULL, command=command, progress=_progress)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(render(results))
    results.write_json(results_path)
    _progress(f"wrote {report} and {results_path} in {results.seconds:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
