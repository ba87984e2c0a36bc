"""bench/celery_sqs.py: Celery on kombu's SQS transport runs the no-op tasks and counts what it sends.

The live run needs the `bench` extra (`make bench` installs it; `make test` does not), and runs
against a strict embedded AWS in this process, so a request of kombu's that AWS would refuse
fails it (tests/conftest.py's nothing_refused). No timing is asserted.
"""

import sys
from collections.abc import Iterator

import pytest

from bench.celery_sqs import measure
from bench.skipped import CannotRunError
from conveyor.local.embedded import EmbeddedAws, free_port

TASKS = 20
# A receive returns at most 10 messages: fewer receives per task than this cannot have delivered them all.
FEWEST_RECEIVES_PER_TASK = 1 / 10


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = EmbeddedAws(free_port())
    server.start()
    try:
        yield server.endpoint_url
    finally:
        server.stop()


def test_without_celery_the_row_is_skipped_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "celery", None)  # `import celery` raises ImportError

    with pytest.raises(CannotRunError, match=r"Celery is not installed .*pip install -e '\.\[bench\]'"):
        measure("http://127.0.0.1:1", tasks=TASKS)


def test_without_pycurl_the_row_is_skipped_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("celery", reason="the bench extra is not installed: make bench installs it")
    monkeypatch.setitem(sys.modules, "pycurl", None)  # importlib finds no pycurl

    with pytest.raises(CannotRunError, match="pycurl"):
        measure("http://127.0.0.1:1", tasks=TASKS)


def test_celery_runs_the_tasks_and_counts_every_request(endpoint: str) -> None:
    pytest.importorskip("celery", reason="the bench extra is not installed: make bench installs it")

    result = measure(endpoint, tasks=TASKS)

    tasks_per_s, requests, note = result["tasks_per_s"], result["requests_per_task"], result["note"]
    assert isinstance(tasks_per_s, float)
    assert tasks_per_s > 0
    assert isinstance(requests, dict)
    assert isinstance(note, str)
    # Celery sends each task alone, and kombu acks each with a DeleteMessage of its own.
    assert requests["sqs.SendMessage"] == 1.0
    assert requests["sqs.DeleteMessage"] == 1.0
    # Sent by kombu's own pycurl client, which only before-sign sees: counted all the same.
    assert requests["sqs.ReceiveMessage"] >= FEWEST_RECEIVES_PER_TASK
    assert "sqs.ReceiveMessage through its own pycurl client" in note
    assert "no idempotency" in note
