"""One declared queue's worker in this process: the harness Lambda would run, and the mapping's receive.

The worker is built exactly as its function builds it (``Worker(Harness(...))``), on the clients
of an in-process moto; ``drain`` receives what is visible as Lambda's poller does (up to the
queue's batch size, every attribute) and hands it to the worker through the local runtime's own
event source emulation (conveyor.local.event_source.run_batch), which applies the partial batch
response. tests/harness_support.py builds its drivers on this class too.
"""

import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from conveyor.contract import limits, naming
from conveyor.contract.topology import Topology
from conveyor.local.event_source import run_batch
from conveyor.local.provision import Provisioned
from conveyor.worker.handler import Worker
from conveyor.worker.harness import Harness
from conveyor.worker.metrics import JobMetrics
from conveyor.worker.outcomes import Observer, fan_out


class QueueWorker:
    """The worker of queue ``name``, reporting each record's outcome to ``observer``."""

    def __init__(
        self,
        topology: Topology,
        provisioned: Provisioned,
        name: str,
        *,
        sqs: Any,
        dynamodb: Any,
        observer: Observer,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.declaration = topology.queue(name)
        self.provisioned = provisioned.queues[name]
        self._sqs = sqs
        self.metrics = JobMetrics()
        self.harness = Harness(
            topology,
            provisioned.worker_settings(name),
            sqs_client=sqs,
            dynamodb_client=dynamodb,
            rng=rng,
            clock=clock,
            observer=fan_out(self.metrics, observer),
        )
        self.worker = Worker(self.harness, self.metrics)

    def receive(
        self, *, max_messages: int = limits.SQS_MAX_RECEIVE_MESSAGES, visibility: int | None = None
    ) -> list[Any]:
        """The visible messages, up to ``max_messages`` (at most 10), with every attribute Lambda's records carry.

        ``visibility`` None keeps the queue's own visibility timeout, as Lambda's poller does.
        """
        request: dict[str, Any] = {
            "QueueUrl": self.provisioned.url,
            "MaxNumberOfMessages": max_messages,
            "MessageAttributeNames": ["All"],
            "MessageSystemAttributeNames": ["All"],
        }
        if visibility is not None:
            request["VisibilityTimeout"] = visibility
        messages: list[Any] = self._sqs.receive_message(**request).get("Messages", [])
        return messages

    def deliver_batch(self) -> int:
        """Receive one batch (as Lambda gathers one, without waiting) and invoke the worker on it; its size.

        Nothing received, nothing invoked: 0.
        """
        batch: list[Any] = []
        while len(batch) < self.declaration.batch_size:
            asked = min(limits.SQS_MAX_RECEIVE_MESSAGES, self.declaration.batch_size - len(batch))
            received = self.receive(max_messages=asked)
            batch += received
            if len(received) < asked:
                break
        if batch:
            run_batch(
                batch,
                handler=self.worker.handle,
                declaration=self.declaration,
                provisioned=self.provisioned,
                sqs=self._sqs,
                function_name=naming.worker_function_name(self.declaration.name),
            )
        return len(batch)
