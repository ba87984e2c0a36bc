"""The `conveyor` console script run in-process as a user runs it, for tests of its bad-input lines and exit codes."""

import json
from typing import Any

from click.testing import CliRunner

from conveyor.cli.main import main


def conveyor(*argv: str) -> tuple[int, str, str]:
    """The entry point's exit code, stdout and stderr: errors leave it as one line and an exit code, as in a shell."""
    with CliRunner().isolation() as (out, err, _):
        try:
            main(list(argv))
            code = 0
        except SystemExit as exited:
            code = int(exited.code or 0)
    return code, out.getvalue().decode(), err.getvalue().decode()


def conveyor_json(*argv: str) -> Any:
    """What a command prints with ``--json``, once it has exited 0; its stderr on failure."""
    code, out, err = conveyor(*argv, "--json")
    assert code == 0, err
    return json.loads(out)
