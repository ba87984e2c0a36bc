"""mypy rejects a payload of the wrong model on a declared job, and accepts the right one."""

import re
import sys
from pathlib import Path

from mypy import api

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "typed_enqueue.py"
ERROR = re.compile(r"^[^:]+:(?P<line>\d+): error: (?P<message>.*)$")
REJECTED = re.compile(r"# rejected: (?P<code>[a-z-]+)$")


def run_mypy(*arguments: str) -> tuple[str, int]:
    """mypy in this process, which it leaves with the recursion limit it found (it raises its own)."""
    limit = sys.getrecursionlimit()
    try:
        stdout, _, status = api.run(list(arguments))
    finally:
        sys.setrecursionlimit(limit)
    return stdout, status


def test_mypy_rejects_exactly_the_wrong_payload_lines() -> None:
    stdout, status = run_mypy("--strict", "--no-error-summary", str(FIXTURE))
    errors = {int(m["line"]): m["message"] for m in map(ERROR.match, stdout.splitlines()) if m}
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    rejected = {number: m["code"] for number, m in enumerate(map(REJECTED.search, lines), start=1) if m}
    assert status == 1
    assert set(errors) == set(rejected), stdout
    for number, code in rejected.items():
        assert 'incompatible type "WelcomeEmail"; expected "ChargeOrder"' in errors[number], stdout
        assert errors[number].endswith(f"[{code}]"), stdout
