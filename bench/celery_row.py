"""Row 6: the same no-op jobs through Celery with kombu's SQS transport, side by side with Conveyor's.

bench/celery_sqs.py measures Celery on the same embedded AWS (``measure(endpoint_url, tasks=N)``,
or ``CannotRunError`` where Celery cannot run); it is imported only here, when the row runs. Conveyor's
side is the throughput row's run at the same depth (the same no-op jobs, preloaded on one queue).
"""

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from bench.figures import Figure, Row, Table
from bench.profiles import sqs_per_job
from bench.skipped import CannotRunError
from bench.throughput import Run

KEY = "celery"
TITLE = "The same jobs through Celery with the kombu SQS transport, on the same moto server"
MODULE = "bench.celery_sqs"
PER_JOB_FORMAT = "{:.3f}"
NO_IDEMPOTENCY = (
    "Celery does no idempotency: a task SQS delivers twice runs twice. Conveyor's figures include its "
    "idempotency writes (DynamoDB), which are what makes a redelivery harmless."
)

Measure = Callable[..., Mapping[str, object]]


def load_measure() -> Measure:
    """bench/celery_sqs.py's ``measure``, or CannotRunError saying why there is none."""
    try:
        module = importlib.import_module(MODULE)
    except ModuleNotFoundError as error:
        if error.name == MODULE:
            raise CannotRunError("bench/celery_sqs.py not written") from error
        raise CannotRunError(f"bench/celery_sqs.py cannot be imported: {error}") from error
    measure: Measure = module.measure
    return measure


def _float(result: Mapping[str, object], key: str) -> float:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CannotRunError(f"bench/celery_sqs.py returned {key}={value!r}, not a number")
    return float(value)


def _requests(result: Mapping[str, object]) -> dict[str, float]:
    value = result.get("requests_per_task")
    if not isinstance(value, Mapping):
        raise CannotRunError(f"bench/celery_sqs.py returned requests_per_task={value!r}, not a mapping")
    return {str(name): float(count) for name, count in value.items()}


def measure(endpoint_url: str, *, tasks: int, conveyor: Run | None) -> Row:
    result = load_measure()(endpoint_url, tasks=tasks)
    return row(
        tasks_per_s=_float(result, "tasks_per_s"),
        requests=_requests(result),
        note=str(result.get("note", "")),
        tasks=tasks,
        conveyor=conveyor,
    )


def row(*, tasks_per_s: float, requests: Mapping[str, float], note: str, tasks: int, conveyor: Run | None) -> Row:
    """Conveyor's figures against Celery's (the anchor); Celery's alone, as counts, if Conveyor's were not measured."""
    celery = {
        "jobs per second": tasks_per_s,
        "SQS requests per job": sqs_per_job(requests),
        "all requests per job": sum(requests.values()),
    }
    units = {"jobs per second": "jobs/s", "SQS requests per job": "req/job", "all requests per job": "req/job"}
    if conveyor is None:  # Celery's own figures stand alone, as counts
        figures = tuple(Figure(f"Celery {name}, {tasks} tasks", value, units[name]) for name, value in celery.items())
    else:
        ours = {
            "jobs per second": tasks / conveyor.seconds,
            "SQS requests per job": sqs_per_job(conveyor.requests_per_job),
            "all requests per job": sum(conveyor.requests_per_job.values()),
        }
        figures = tuple(
            Figure(f"{name}, {tasks} jobs", ours[name], units[name], anchor=value, anchor_label="Celery + kombu SQS")
            for name, value in celery.items()
        )
    names = sorted({*requests, *(conveyor.requests_per_job if conveyor else {})})
    table = Table(
        "Requests per job by service.operation",
        ("request", "Conveyor", "Celery"),
        tuple(
            (
                name,
                PER_JOB_FORMAT.format(conveyor.requests_per_job.get(name, 0.0)) if conveyor else "-",
                PER_JOB_FORMAT.format(requests.get(name, 0.0)),
            )
            for name in names
        ),
    )
    notes = (NO_IDEMPOTENCY, *((f"Celery's side: {note}",) if note else ()))
    data: dict[str, Any] = {"celery": {"tasks": tasks, "tasks_per_s": tasks_per_s, "requests_per_task": dict(requests)}}
    return Row(KEY, TITLE, figures, (table,), notes, data=data)
