"""Routes and payload validation from the committed JSON Schema, for producers outside the project.

``conveyor schema`` writes one document (docs/schema/envelope.schema.json): the envelope, each
job type's current payload schema, and under ``x-conveyor`` each job type's queue, version and
size limit. A producer that installs only the SDK enqueues by job type name and a payload dict,
checked against that document before anything is sent, without importing the project's code.

Validation is jsonschema's (the reference implementation of JSON Schema 2020-12, the dialect
pydantic writes). It is imported here only, so the worker's Lambda bundle never needs it.
"""

import json
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel

from conveyor.contract.declarations import DEFAULT_DEDUPE_WINDOW, JobType
from conveyor.contract.errors import DeclarationError, InvalidJobError
from conveyor.contract.schema import ROUTES_KEY
from conveyor.sdk.catalog import Route

# Stands in for the fields the SDK fills itself, so a payload is checked in a whole envelope.
_PROBE = {"id": "schema-probe", "created_at": "1970-01-01T00:00:00Z"}


class SchemaCatalog:
    def __init__(self, schema: str | os.PathLike[str] | Mapping[str, Any]) -> None:
        document = schema if isinstance(schema, Mapping) else _read(Path(schema))
        where = "schema" if isinstance(schema, Mapping) else str(schema)
        routes = document.get(ROUTES_KEY)
        if not isinstance(routes, Mapping) or not isinstance(routes.get("job_types"), Mapping):
            raise DeclarationError(f"{where}: no {ROUTES_KEY!r} routes; regenerate it with `conveyor schema`")
        try:
            Draft202012Validator.check_schema(document)
        except Exception as error:  # jsonschema's SchemaError: the document itself is broken
            raise DeclarationError(f"{where}: not a valid JSON Schema: {error}") from error
        self._validator = Draft202012Validator(document)
        self._queues: Mapping[str, Mapping[str, Any]] = routes["queues"]
        self._routes = {
            name: Route(
                job_type=name,
                version=entry["version"],
                queue=entry["queue"],
                fifo=bool(self._queues[entry["queue"]]["fifo"]),
                max_payload_bytes=entry["max_payload_bytes"],
                # A schema written before dedupe windows were declared has the default's.
                dedupe_window=timedelta(seconds=entry.get("dedupe_window_s", DEFAULT_DEDUPE_WINDOW.total_seconds())),
            )
            for name, entry in routes["job_types"].items()
        }

    def route(self, job: JobType[Any] | str) -> Route:
        name = job if isinstance(job, str) else job.name
        route = self._routes.get(name)
        if route is None:
            raise InvalidJobError(
                f"job: unknown job type {name!r}; the schema declares {', '.join(sorted(self._routes))}"
            )
        return route

    def payload(self, route: Route, payload: BaseModel | Mapping[str, Any], where: str) -> dict[str, Any]:
        data = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        if not isinstance(data, Mapping):
            raise InvalidJobError(f"{where}: payload is a {type(payload).__name__}; expected a dict")
        probe = {**_PROBE, "type": route.job_type, "v": route.version, "data": dict(data)}
        errors = sorted(self._validator.iter_errors(probe), key=lambda error: list(error.absolute_path))
        if errors:
            first = errors[0]
            field = ".".join(str(part) for part in list(first.absolute_path)[1:])
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise InvalidJobError(f"{where}: payload: {field + ': ' if field else ''}{first.message}{more}")
        return dict(data)

    def fifo(self, queue: str) -> bool:
        return bool(self._queues[queue]["fifo"])


def _read(path: Path) -> Mapping[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise DeclarationError(f"{path}: cannot read the schema ({error.strerror})") from error
    except ValueError as error:
        raise DeclarationError(f"{path}: not JSON ({error})") from error
    if not isinstance(document, Mapping):
        raise DeclarationError(f"{path}: not a JSON Schema document")
    return document
