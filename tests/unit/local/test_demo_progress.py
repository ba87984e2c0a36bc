"""The demo's live progress: redrawn in place by rich on a terminal, printed plainly now and then elsewhere."""

import io
from types import SimpleNamespace
from typing import Any

from conveyor.local.demo import Observed, Progress
from tests.aws import Aws


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _runtime(aws: Aws) -> Any:
    """What Progress reads of a LocalRuntime: the provisioned queues and an SQS client."""
    return SimpleNamespace(provisioned=aws.provisioned, sqs=aws.sqs)


def test_on_a_terminal_the_view_is_redrawn_in_place_and_the_cursor_given_back(aws: Aws) -> None:
    out = _Terminal()
    progress = Progress(_runtime(aws), Observed(), out)
    progress.show(0.5)
    progress.show(1.0, final=True)
    progress.stop()  # as run_demo's finally does: harmless once stopped
    shown = out.getvalue()
    assert shown.count("QUEUE") == 3  # the first draw, the redraw, and the final frame Live leaves
    assert "t=  1.0s" in shown.rsplit("QUEUE", 1)[1]
    assert shown.endswith("\x1b[?25h")  # the cursor is shown again


def test_without_a_terminal_the_view_is_plain_text(aws: Aws) -> None:
    out = io.StringIO()
    Progress(_runtime(aws), Observed(), out).show(0.1, final=True)
    header, *rows = out.getvalue().splitlines()
    assert header.split()[:6] == ["QUEUE", "DEPTH", "IN", "FLIGHT", "DONE", "RETRIED"]
    assert [row.split()[0] for row in rows] == list(aws.provisioned.queues)
    assert "\x1b" not in out.getvalue()
