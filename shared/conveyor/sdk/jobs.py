"""The ``@job`` decorator and the ``Job`` it declares: a job type that is also its handler and its producer.

``charge_order.enqueue(ChargeOrder(...))`` is typed by the payload model, so a type checker
rejects a wrong payload where it is written; ``charge_order(payload, ctx)`` calls the handler, as a
user's unit test does. The contract's ``JobType`` is what the worker and the stack read; this
subclass lives in the SDK because enqueueing needs a client.
"""

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from conveyor.contract.declarations import (
    DEFAULT_DEDUPE_WINDOW,
    DEFAULT_MAX_PAYLOAD_BYTES,
    JOB_NAME_PATTERN,
    Handler,
    JobType,
    RetryPolicy,
    Upcaster,
)
from conveyor.contract.envelope import Correlation
from conveyor.contract.errors import DeclarationError, require
from conveyor.contract.job_context import JobContext
from conveyor.sdk.client_context import default_client
from conveyor.sdk.prepare import JobRequest

if TYPE_CHECKING:
    from conveyor.sdk.client import JobClient

P = TypeVar("P", bound=BaseModel)


class Job(JobType[P]):
    """A declared job type: call it to run the handler, or enqueue it with a payload of its model.

    Without ``client=``, enqueueing goes through ``default_client()`` (conveyor.sdk.client_context).
    """

    def __call__(self, payload: P, ctx: JobContext) -> object:
        """Run the handler directly, without the harness: for unit tests of the job's own logic."""
        return self.handler(payload, ctx)

    def request(
        self,
        payload: P,
        *,
        dedupe_key: str | None = None,
        delay: timedelta | None = None,
        group: str | None = None,
        job_id: str | None = None,
    ) -> JobRequest:
        """This job as a request for ``JobClient.transact`` or ``JobClient.enqueue_many``."""
        return JobRequest(self, payload, dedupe_key=dedupe_key, delay=delay, group=group, job_id=job_id)

    def enqueue(
        self,
        payload: P,
        *,
        dedupe_key: str | None = None,
        delay: timedelta | None = None,
        group: str | None = None,
        correlation: Correlation | None = None,
        client: "JobClient | None" = None,
    ) -> str:
        """Enqueue one job and return its id once SQS has accepted it (``JobClient.enqueue``)."""
        return (client or default_client()).enqueue(
            self, payload, dedupe_key=dedupe_key, delay=delay, group=group, correlation=correlation
        )

    def enqueue_many(
        self,
        payloads: Iterable[P],
        *,
        correlation: Correlation | None = None,
        client: "JobClient | None" = None,
    ) -> list[str]:
        """Enqueue one job per payload, in batches; ids come back in order (``JobClient.enqueue_many``).

        For per-job options (a dedupe key, a FIFO group), pass ``request(...)``s to ``JobClient.enqueue_many``.
        """
        requests = [self.request(payload) for payload in payloads]
        return (client or default_client()).enqueue_many(requests, correlation=correlation)


def job(
    name: str | None = None,
    *,
    queue: str,
    model: type[BaseModel] | None = None,
    version: int = 1,
    upcasters: Mapping[int, Upcaster] | None = None,
    retry: RetryPolicy | None = None,
    timeout: timedelta | None = None,
    idempotency_key: str | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    permanent_on: tuple[type[BaseException], ...] = (),
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    destinations: tuple[str, ...] = (),
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> Callable[[Handler[P]], Job[P]]:
    """Declare a job type around its handler: ``@job(queue="critical") def charge_order(payload: ChargeOrder, ctx)``.

    The type's name defaults to the function's and its model to the first parameter's annotation,
    which also types ``enqueue``; ``name`` and ``model`` given here set them, and a model given must
    be the annotated one, if any (``enqueue`` is typed by the one, the worker validates with the
    other). The name is the wire contract: renaming a function whose job has no explicit name
    renames its type, and messages of the old name dead-letter.
    """

    def declare(handler: Handler[P]) -> Job[P]:
        where = f"job {getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"
        type_name = name if name is not None else _function_name(handler, where)
        return Job(
            name=type_name,
            queue=queue,
            model=_payload_model(handler, model, where),
            handler=handler,
            version=version,
            upcasters=dict(upcasters or {}),
            retry=retry or RetryPolicy(),
            timeout=timeout,
            idempotency_key=idempotency_key,
            retry_on=retry_on,
            permanent_on=permanent_on,
            max_payload_bytes=max_payload_bytes,
            destinations=destinations,
            dedupe_window=dedupe_window,
        )

    return declare


def _function_name(handler: Callable[..., object], where: str) -> str:
    function_name = getattr(handler, "__name__", "")
    require(
        bool(JOB_NAME_PATTERN.match(function_name)),
        where,
        f"the function name {function_name!r} is not a job type name ({JOB_NAME_PATTERN.pattern}); "
        'pass one: @job("name", ...)',
    )
    return function_name


def _payload_model(handler: Callable[..., object], model: type[BaseModel] | None, where: str) -> Any:
    """The payload model: ``model``, else the first parameter's annotation, which must be a pydantic model.

    Both given, they must be one class: ``enqueue`` is typed by the annotation, and the worker
    validates with the model. The JobType checks the rest.
    """
    try:
        parameters = list(inspect.signature(handler).parameters.values())
        hints = typing.get_type_hints(handler)
    except (NameError, TypeError, ValueError) as error:  # an unresolvable annotation, an uninspectable callable
        if model is not None:
            return model
        raise DeclarationError(f"{where}: cannot read its annotations ({error}); pass model=") from error
    annotation = hints.get(parameters[0].name) if parameters else None
    annotated = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    if model is None:
        require(
            annotated, where, "annotate the first parameter with the payload model (a conveyor.Payload) or pass model="
        )
        return annotation
    require(
        not annotated or model is annotation,
        where,
        f"model={getattr(model, '__name__', model)} but the first parameter is annotated "
        f"{getattr(annotation, '__name__', annotation)}: enqueue would take one and the worker validate the other",
    )
    return model
