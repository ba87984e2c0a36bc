"""The declared workers and stream relays, running in this process against an AWS endpoint.

Each queue gets the worker the stack would deploy (the same harness, the same settings)
behind an event source mapping emulator; each relayed stream (the outbox's, and every table
that stream rules read) gets its relay behind the stream mapping's emulator; declared schedules
fire from the scheduler emulator (conveyor.local.scheduler). Stopping drains: schedules stop
firing, pollers stop receiving, and in-flight batches finish within a grace period or return to
their queue when their visibility timeout lapses (a stream is read again from its start by the next run).
``reload`` does the same to the workers alone: the embedded AWS, and every queue's messages, stay.

The workers' output (their JSON logs and EMF lines) goes where CloudWatch Logs would take it:
EMF to the embedded CloudWatch, each queue's log records to its worker log group on the embedded
CloudWatch Logs (conveyor.local.log_shipper), and the rest to the console, as JSON or readable lines
(conveyor.local.console).

Idle, the whole of it costs under a request a second: a long poll per queue, a read of every
queue's mapping state every few seconds, and stream reads that back off while the streams are quiet.
"""

import logging
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import boto3
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.contract import naming
from conveyor.contract.settings import SERVICE_NAME
from conveyor.contract.topology import Topology
from conveyor.local.embedded import LOCAL_CREDENTIALS, REGION, LocalRuntimeError
from conveyor.local.emf import RAW_VALUES_FILE, EmfForwarder
from conveyor.local.event_source import CONTROL_POLL_S, QueuePoller, StateReader
from conveyor.local.log_shipper import LogShipper
from conveyor.local.provision import Provisioned, provision
from conveyor.local.scale_on_age import ScaleLoop, local_scaler
from conveyor.local.scheduler import LocalScheduler, ScheduleClock
from conveyor.local.stream_source import StreamPoller
from conveyor.local.text_sink import TextSink
from conveyor.ops.event_sources import LocalEventSources
from conveyor.worker.handler import Worker
from conveyor.worker.harness import Harness
from conveyor.worker.metrics import JobMetrics
from conveyor.worker.outcomes import Observer, fan_out, ignore
from conveyor.worker.relay import Relay


def local_environment(endpoint_url: str) -> dict[str, str]:
    """What every boto3 client in the process (the jobs' own included) needs to reach the endpoint."""
    return {"AWS_ENDPOINT_URL": endpoint_url, **embedded_environment()}


def embedded_environment() -> dict[str, str]:
    """What every boto3 client needs for an embedded AWS, wherever it is (in this process: conveyor.testing)."""
    return {
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        # DynamoDB Streams calls carry an ARN; moto serves only the region endpoint.
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        **LOCAL_CREDENTIALS,
    }


def worker_log_handlers() -> list[logging.StreamHandler[Any]]:
    """The handlers of the workers' Powertools logger: each keeps the stream it was made with."""
    return [h for h in logging.getLogger(SERVICE_NAME).handlers if isinstance(h, logging.StreamHandler)]


def worker_log_groups(topology: Topology) -> dict[str, str]:
    """Each declared queue's worker log group on the embedded CloudWatch Logs."""
    return {queue.name: naming.local_worker_log_group(queue.name) for queue in topology.queues}


class LocalRuntime:
    def __init__(
        self,
        topology: Topology,
        *,
        endpoint_url: str,
        observer: Observer = ignore,
        schedule_clock: ScheduleClock | None = None,
        control_poll_s: float = CONTROL_POLL_S,
    ) -> None:
        self.topology = topology
        # How often pause, resume and concurrency changes are read; shorter in tests that make them.
        self._control_poll_s = control_poll_s
        self.endpoint_url = endpoint_url
        self._observer = observer
        # The scheduler emulator's clock; the wall clock unless a test or the demo sets it.
        self._schedule_clock = schedule_clock or ScheduleClock()
        self.sqs: Any = boto3.client("sqs", endpoint_url=endpoint_url, region_name=REGION)
        self.dynamodb: Any = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name=REGION)
        self.cloudwatch: Any = boto3.client("cloudwatch", endpoint_url=endpoint_url, region_name=REGION)
        self.streams: Any = boto3.client("dynamodbstreams", endpoint_url=endpoint_url, region_name=REGION)
        self.logs: Any = boto3.client("logs", endpoint_url=endpoint_url, region_name=REGION)
        self._stdout: TextIO | None = None
        # The workers' log handlers and the streams they had before ``start``.
        self._log_streams: list[tuple[logging.StreamHandler[Any], Any]] = []
        self._shipper: LogShipper | None = None
        self.pollers: dict[str, QueuePoller] = {}
        # Relay source (as in Provisioned.streams) -> the poller of its stream.
        self.stream_pollers: dict[str, StreamPoller] = {}
        self._provisioned: Provisioned | None = None
        self._scheduler: LocalScheduler | None = None
        self._states: StateReader | None = None
        # The age controller, for topologies with queues that scale on age.
        self.scale_loop: ScaleLoop | None = None

    @property
    def scheduler(self) -> LocalScheduler:
        """The scheduler emulator firing the declared schedules; running once ``start`` has, if any are declared."""
        if self._scheduler is None:
            raise LocalRuntimeError("the local runtime runs no scheduler: not started, or no schedules declared")
        return self._scheduler

    @property
    def provisioned(self) -> Provisioned:
        """Where the local resources are; known once ``provision`` (or ``start``) has run."""
        if self._provisioned is None:
            raise LocalRuntimeError("the local runtime has not provisioned its resources yet")
        return self._provisioned

    def provision(self) -> Provisioned:
        self._provisioned = provision(self.topology, sqs=self.sqs, dynamodb=self.dynamodb)
        return self._provisioned

    def start(self, *, raw_values: Path = RAW_VALUES_FILE, console: TextSink | None = None) -> None:
        """Provision, then start one poller per queue, each invoking that queue's worker, and one per
        relayed stream, each invoking that stream's relay.

        The workers' output goes through an EMF forwarder and a log shipper, as their output would go
        through CloudWatch Logs in AWS: metrics reach the embedded CloudWatch (raw values
        ``raw_values``), log records their queue's log group, and every line ``console`` (stdout,
        unless a console from conveyor.local.console, which drops EMF, is given).
        """
        self.provision()
        self._stdout = sys.stdout
        self._shipper = LogShipper(console or sys.stdout, self.logs, worker_log_groups(self.topology))
        self._shipper.start()
        output = EmfForwarder(self._shipper, self.cloudwatch, raw_values)
        sys.stdout = output
        self._log_streams = [(handler, handler.setStream(output)) for handler in worker_log_handlers()]
        self._start_workers()

    def reload(self, topology: Topology, grace_s: float) -> bool:
        """Run ``topology``'s workers instead of the current ones; True if no batch was left running.

        What it adds is provisioned first, while the old workers run (a refusal leaves them as they
        were); existing queues and their messages stay as they are. Then the workers restart, and
        the relays read their streams on from where they were.
        """
        provisioned = provision(topology, sqs=self.sqs, dynamodb=self.dynamodb)
        if self._shipper is not None:
            self._shipper.add_groups(worker_log_groups(topology))
        finished = self._stop_workers(grace_s)
        self.topology, self._provisioned, self._scheduler = topology, provisioned, None
        self._start_workers(resume=self.stream_pollers)
        return finished

    def _start_workers(self, resume: dict[str, StreamPoller] | None = None) -> None:
        """Start the queue pollers, the scheduler and the relays (reading on where those of ``resume`` stopped)."""
        provisioned = self.provisioned
        self.pollers, self.stream_pollers = {}, {}
        # The stack gives every worker these variables; here all workers share one process.
        os.environ.update(provisioned.table_environment())
        # What `conveyor pause/resume/concurrency` change locally, read for every queue at once.
        event_sources = LocalEventSources(
            self.dynamodb, provisioned.event_sources_table, audit_table=provisioned.audit_table
        )
        for queue in self.topology.queues:
            metrics = JobMetrics()
            harness = Harness(
                self.topology,
                provisioned.worker_settings(queue.name),
                sqs_client=self.sqs,
                dynamodb_client=self.dynamodb,
                observer=fan_out(metrics, self._observer),
            )
            poller = QueuePoller(
                declaration=queue,
                provisioned=provisioned.queues[queue.name],
                handler=Worker(harness, metrics).handle,
                sqs=self.sqs,
                function_name=naming.worker_function_name(queue.name),
            )
            self.pollers[queue.name] = poller
        self._states = StateReader(
            partial(event_sources.states, list(self.pollers)), self.pollers, period_s=self._control_poll_s
        )
        self._states.start()  # first: a queue paused before the start must not receive even briefly
        for poller in self.pollers.values():
            poller.start()
        self.scale_loop = None
        if any(queue.scale_on_age for queue in self.topology.queues):
            # The EventBridge rule's every-minute run of the controller, on the runtime's clock.
            scaler = local_scaler(
                self.topology,
                dynamodb=self.dynamodb,
                cloudwatch=self.cloudwatch,
                event_sources=event_sources,
                clock=self._schedule_clock,
            )
            self.scale_loop = ScaleLoop(scaler)
            self.scale_loop.start()
        for source, stream_arn in provisioned.streams.items():
            relay = Relay(
                self.topology, provisioned.relay_settings(source), sqs_client=self.sqs, dynamodb_client=self.dynamodb
            )
            stream_poller = StreamPoller(
                stream_arn=stream_arn,
                handler=partial(_invoke_relay, relay),
                streams=self.streams,
                sqs=self.sqs,
                dlq_url=provisioned.relay_dlq_url,
                function_name=f"{naming.current_prefix()}-relay-{source}",
            )
            if resume and source in resume:
                stream_poller.resume_after(resume[source])
            self.stream_pollers[source] = stream_poller
            stream_poller.start()
        if self.topology.schedules:
            # moto stores schedules but never fires them: the emulator sends what Scheduler would.
            self._scheduler = LocalScheduler(
                self.topology,
                sqs=self.sqs,
                queues=provisioned.queues,
                clock=self._schedule_clock,
                dlq_url=provisioned.schedules_dlq_url,
            )
            self._scheduler.start()

    def drain(self, grace_s: float) -> bool:
        """Stop firing and receiving, wait up to ``grace_s`` for in-flight batches; True if none was left running."""
        finished = self._stop_workers(grace_s)
        for handler, stream in self._log_streams:
            handler.setStream(stream)
        self._log_streams = []
        if self._stdout is not None:
            sys.stdout, self._stdout = self._stdout, None
        if self._shipper is not None:
            self._shipper.stop()
            self._shipper = None
        return finished

    def _stop_workers(self, grace_s: float) -> bool:
        deadline = time.monotonic() + grace_s
        stopped = self._scheduler is None or self._scheduler.stop(grace_s)
        threads: list[StateReader | ScaleLoop | QueuePoller | StreamPoller] = [
            *([self._states] if self._states is not None else []),
            *([self.scale_loop] if self.scale_loop is not None else []),
            *self.pollers.values(),
            *self.stream_pollers.values(),
        ]
        for thread in threads:
            thread.stop()
        return all(thread.join(deadline) for thread in threads) and stopped


def _invoke_relay(relay: Relay, event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """The relay as its function invokes it; only the entry point's logger decorator reads the context."""
    return relay.handle(event)
