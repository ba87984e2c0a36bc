"""The Celery row: Conveyor's figures beside Celery's, or Celery's alone; a missing or broken module is a skip."""

import sys

import pytest

from bench import celery_row
from bench.skipped import CannotRunError
from bench.throughput import Run

CELERY_REQUESTS = {"sqs.SendMessage": 1.0, "sqs.ReceiveMessage": 0.5, "sqs.DeleteMessage": 1.0}
CONVEYOR = Run(seconds=2.0, requests_per_job={"sqs.SendMessageBatch": 0.1, "dynamodb.PutItem": 1.0}, preload_s=0.5)


def test_conveyors_figures_are_held_against_celerys() -> None:
    row = celery_row.row(tasks_per_s=40.0, requests=CELERY_REQUESTS, note="threads", tasks=100, conveyor=CONVEYOR)
    jobs, sqs, total = row.figures
    assert (jobs.value, jobs.anchor, jobs.ratio) == (50.0, 40.0, 1.25)
    assert (sqs.value, sqs.anchor) == (0.1, 2.5)
    assert (total.value, total.anchor) == (1.1, 2.5)
    assert all(figure.target is None for figure in row.figures)
    assert celery_row.NO_IDEMPOTENCY in row.notes
    assert ("dynamodb.PutItem", "1.000", "0.000") in row.tables[0].rows


def test_without_conveyors_run_celerys_figures_are_counts() -> None:
    row = celery_row.row(tasks_per_s=40.0, requests=CELERY_REQUESTS, note="", tasks=100, conveyor=None)
    first = row.figures[0]
    assert (first.name, first.value, first.anchor) == ("Celery jobs per second, 100 tasks", 40.0, None)


def test_a_module_not_written_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, celery_row.MODULE, None)  # import raises ModuleNotFoundError naming it
    with pytest.raises(CannotRunError, match=r"bench/celery_sqs\.py"):
        celery_row.load_measure()


def test_a_result_of_the_wrong_shape_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(celery_row, "load_measure", lambda: lambda endpoint, tasks: {"tasks_per_s": "fast"})
    with pytest.raises(CannotRunError, match="tasks_per_s='fast', not a number"):
        celery_row.measure("http://127.0.0.1:1", tasks=10, conveyor=None)
