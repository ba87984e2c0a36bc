"""After `source .venv/bin/activate`, `conveyor` is Conveyor's command, and the project installs no `jobs`.

The command was `jobs`, which bash's builtin of that name shadows whatever is on PATH; the
README tells users to activate the venv and run `conveyor`.
"""

import json
import os
import subprocess
from pathlib import Path

from tests.e2e.conftest import ROOT

VENV = ROOT / ".venv"
TIMEOUT_S = 60.0


def _in_activated_venv(command: str) -> "subprocess.CompletedProcess[str]":
    """``command`` in a bash that has sourced the project's venv, from the repository root, as a user types it."""
    assert (VENV / "bin" / "activate").is_file(), f"no venv at {VENV}: run `make setup` first"
    # Nothing of this process's environment may define the command instead (BASH_ENV is sourced first).
    environment = {name: value for name, value in os.environ.items() if name not in {"BASH_ENV", "ENV"}}
    return subprocess.run(
        ["bash", "-c", f"source .venv/bin/activate && {command}"],
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_the_activated_venv_runs_conveyors_help() -> None:
    result = _in_activated_venv("command -v conveyor && conveyor --help")

    assert result.returncode == 0, f"exit {result.returncode}\nstderr:\n{result.stderr}\nstdout:\n{result.stdout}"
    found, _, help_text = result.stdout.partition("\n")
    assert Path(found) == VENV / "bin" / "conveyor"
    assert help_text.startswith("Usage: conveyor [OPTIONS] COMMAND [ARGS]..."), help_text
    assert "Operate Conveyor queues and jobs." in help_text
    commands = help_text.partition("\nCommands:\n")[2].split()
    assert {"local", "topology", "enqueue", "dlq", "status"} <= set(commands), help_text


def test_the_project_installs_conveyor_and_no_jobs_command() -> None:
    script = (
        "import importlib.metadata, json; "
        "print(json.dumps(sorted(entry.name for entry in importlib.metadata.distribution('conveyor').entry_points "
        "if entry.group == 'console_scripts')))"
    )
    result = _in_activated_venv(f'python -c "{script}"')

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["conveyor"]
    assert not (VENV / "bin" / "jobs").exists(), "a `jobs` script from an older install is left in .venv/bin"
