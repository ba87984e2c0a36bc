"""What a producer needs to know about a job type: where it goes and what its payload must be.

A producer inside the project has the topology itself (``TopologyCatalog``: pydantic models,
upcasting, the declared queues). A producer in another repository has only the committed JSON
Schema (conveyor.sdk.schema_catalog). ``prepare`` builds messages from either, alike.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from conveyor.contract.declarations import JobType
from conveyor.contract.errors import ContractError, InvalidJobError
from conveyor.contract.topology import Topology


@dataclass(frozen=True)
class Route:
    """A job type as the producer sends it: its current version, its queue, its size limit, its dedupe window."""

    job_type: str
    version: int
    queue: str
    fifo: bool
    max_payload_bytes: int
    dedupe_window: timedelta


class Catalog(Protocol):
    def route(self, job: JobType[Any] | str) -> Route:
        """The job type's route; InvalidJobError if the job type is unknown."""
        ...

    def payload(self, route: Route, payload: BaseModel | Mapping[str, Any], where: str) -> dict[str, Any]:
        """The payload as the envelope's ``data`` (JSON values), validated; InvalidJobError says why not."""
        ...

    def fifo(self, queue: str) -> bool:
        """Whether the declared queue is FIFO (its physical name ends in .fifo)."""
        ...


class TopologyCatalog:
    """Routes and payload models from the project's own declarations."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology

    def route(self, job: JobType[Any] | str) -> Route:
        job_type = self._job_type(job)
        return Route(
            job_type=job_type.name,
            version=job_type.version,
            queue=job_type.queue,
            fifo=self.fifo(job_type.queue),
            max_payload_bytes=job_type.max_payload_bytes,
            dedupe_window=job_type.dedupe_window,
        )

    def payload(self, route: Route, payload: BaseModel | Mapping[str, Any], where: str) -> dict[str, Any]:
        job_type = self._topology.job_type(route.job_type)
        if isinstance(payload, job_type.model):
            data: Mapping[str, Any] = payload.model_dump(mode="json")
        elif isinstance(payload, Mapping):
            data = payload
        else:
            raise InvalidJobError(
                f"{where}: payload is a {type(payload).__name__}; expected {job_type.model.__name__} or a dict"
            )
        try:
            validated: BaseModel = job_type.load_payload(data, job_type.version)
        except ContractError as error:
            raise InvalidJobError(f"{where}: payload: {error}") from error
        dumped: dict[str, Any] = validated.model_dump(mode="json")
        return dumped

    def fifo(self, queue: str) -> bool:
        return self._topology.queue(queue).fifo

    def _job_type(self, job: JobType[Any] | str) -> JobType[Any]:
        name = job if isinstance(job, str) else job.name
        try:
            declared = self._topology.job_type(name)
        except ContractError as error:
            raise InvalidJobError(f"job: {error}") from error
        if not isinstance(job, str) and declared is not job:
            raise InvalidJobError(f"job: {name!r} is not the job type declared in the topology")
        return declared
