"""`conveyor local up` prints the shell lines that point another shell at it, from the one environment it uses."""

import subprocess

from conveyor.cli.local_commands import export_lines
from conveyor.local.runtime import local_environment

ENDPOINT = "http://127.0.0.1:4566"


def test_the_export_lines_set_exactly_the_local_environment_in_a_shell() -> None:
    lines = export_lines(ENDPOINT)
    expected = local_environment(ENDPOINT)
    named = {"AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert named <= set(expected)
    script = "\n".join([*lines, *(f'printf "%s=%s\\n" {name} "${name}"' for name in expected)])
    shown = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True, env={}).stdout
    assert dict(line.split("=", 1) for line in shown.splitlines()) == expected
