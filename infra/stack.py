"""The Conveyor stack: composes one construct per concern from the project's declarations."""

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_logs as logs
from constructs import Construct

from conveyor.contract import naming, outputs
from conveyor.contract.relay_settings import OUTBOX_SOURCE
from conveyor.contract.topology import Topology
from conveyor.sdk import dedupe as dedupe_records
from conveyor.worker import checkpoints, lease, schedule_runs
from conveyor.worker.destinations import state as limits_state
from infra.alarm_topic import AlarmTopic
from infra.checkpoints_table import WorkerStateTable
from infra.dashboard import JobsDashboard
from infra.destination_monitoring import DestinationMonitoring
from infra.effects_ledger import EffectsLedgerTable
from infra.idempotency_table import IdempotencyTable
from infra.job_queue import JobQueue, WorkerTables
from infra.job_table import JobTable
from infra.operations import Operations
from infra.outbox_relay import OutboxRelay, RelayDeadLetterQueue
from infra.queue_monitoring import QueueMonitoring
from infra.scale_on_age import ScaleOnAge
from infra.schedules import Schedules
from infra.worker_package import WorkerPackage


class ConveyorStack(Stack):
    """Adding a queue to the topology adds its JobQueue here; the stack lists no resources."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topology: Topology,
        topology_spec: str,
        prefix: str,
        powertools_layer_version: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="Conveyor: background jobs on SQS, Lambda and DynamoDB",
        )
        alarms = AlarmTopic(self, "Alarms")
        idempotency = IdempotencyTable(self, "Idempotency")
        worker_tables = WorkerTables(
            idempotency=idempotency.table,
            checkpoints=WorkerStateTable(
                self, "Checkpoints", key=checkpoints.KEY, ttl_attribute=checkpoints.EXPIRES_AT
            ).table,
            schedule_runs=WorkerStateTable(
                self, "ScheduleRuns", key=schedule_runs.KEY, ttl_attribute=schedule_runs.EXPIRES_AT
            ).table,
            # No TTL: deleting a lease item would restart its fencing token (conveyor.worker.lease).
            leases=WorkerStateTable(self, "Leases", key=lease.KEY, ttl_attribute=None).table,
            limits=WorkerStateTable(self, "Limits", key=limits_state.KEY, ttl_attribute=limits_state.EXPIRES_AT).table,
            ledger=EffectsLedgerTable(self, "Ledger").table,
        )
        package = WorkerPackage(
            self, "WorkerPackage", powertools_layer_version=powertools_layer_version, topology_spec=topology_spec
        )
        self.job_queues = {
            declaration.name: JobQueue(
                self,
                f"Queue-{declaration.name}",
                declaration=declaration,
                prefix=prefix,
                max_receive_count=topology.max_receive_count(declaration.name),
                package=package,
                tables=worker_tables,
                alarm_topic=alarms.topic,
                log_retention=log_retention,
            )
            for declaration in topology.queues
        }
        dashboard = JobsDashboard(self, "Dashboard", name=f"{prefix}-jobs")
        for name, job_queue in self.job_queues.items():
            monitoring = QueueMonitoring(
                self,
                f"Monitoring-{name}",
                job_queue=job_queue,
                job_types=tuple(job.name for job in topology.job_types_on(name)),
                alarm_topic=alarms.topic,
            )
            dashboard.add_queue(monitoring)
        streamed = {table.name for table in topology.streamed_tables()}
        tables: dict[str, JobTable] = {}
        for declaration in topology.tables:
            table = JobTable(
                self, f"Table-{declaration.name}", declaration=declaration, streamed=declaration.name in streamed
            )
            for job_queue in self.job_queues.values():
                table.grant_to(job_queue.function)
            tables[declaration.name] = table
        relay_dlq = RelayDeadLetterQueue(self, "RelayDlq", prefix=prefix, alarm_topic=alarms.topic)
        # Which job each dedupe key given at enqueue made: an item per key, gone by TTL after its window.
        # Named as the SDK's default (naming.table_name), so a producer finds it as it finds a queue.
        dedupe = WorkerStateTable(
            self,
            "Dedupe",
            key=dedupe_records.KEY,
            ttl_attribute=dedupe_records.EXPIRES_AT,
            table_name=naming.table_name(naming.DEDUPE_TABLE, prefix=prefix),
        )
        queues = {name: job_queue.queue for name, job_queue in self.job_queues.items()}

        def relay(construct_id: str, source: str, table: dynamodb.ITable | None = None) -> OutboxRelay:
            return OutboxRelay(
                self,
                construct_id,
                source=source,
                table=table,
                queues=queues,
                dlq=relay_dlq.queue,
                dedupe_table=dedupe.table,
                package=package,
                alarm_topic=alarms.topic,
                log_retention=log_retention,
            )

        self.outbox = relay("Outbox", OUTBOX_SOURCE)
        # Jobs may enqueue follow-up work atomically with their own writes, as any producer does.
        for job_queue in self.job_queues.values():
            self.outbox.grant_enqueue(job_queue.function)
        self.relays = [self.outbox] + [
            relay(f"StreamRelay-{name}", name, tables[name].table) for name in sorted(streamed)
        ]
        dashboard.add_relays(self.relays, relay_dlq.queue)
        # Scheduler schedules, their DLQ and their alarms exist only for declared schedules.
        self.schedules = (
            Schedules(self, "Schedules", topology=topology, prefix=prefix, queues=queues, alarm_topic=alarms.topic)
            if topology.schedules
            else None
        )
        if self.schedules is not None:
            dashboard.add_schedules(self.schedules)
        # The destinations' alarms and dashboard rows exist only for declared destinations.
        self.destinations = [
            DestinationMonitoring(
                self, f"Destination-{declaration.name}", destination=declaration, alarm_topic=alarms.topic
            )
            for declaration in topology.destinations
        ]
        if self.destinations:
            dashboard.add_destinations(self.destinations)
        operations = Operations(
            self,
            "Operations",
            prefix=prefix,
            job_queues=self.job_queues,
            idempotency_table=idempotency.table,
            limits_table=worker_tables.limits,
            ledger_table=worker_tables.ledger,
            own_dlq_arns=[relay_dlq.queue.queue_arn]
            + ([self.schedules.dlq.queue_arn] if self.schedules is not None else []),
            dedupe_table=dedupe.table,
            package=package,
            log_retention=log_retention,
        )
        # The age controller exists only when a queue scales on age.
        scaled = {name: job_queue for name, job_queue in self.job_queues.items() if job_queue.declaration.scale_on_age}
        self.scale_on_age = (
            ScaleOnAge(
                self,
                "ScaleOnAge",
                job_queues=scaled,
                package=package,
                audit_table=operations.audit_table,
                alarm_topic=alarms.topic,
                log_retention=log_retention,
            )
            if scaled
            else None
        )
        CfnOutput(self, outputs.ALARM_TOPIC, value=alarms.topic.topic_arn)
        CfnOutput(self, outputs.IDEMPOTENCY_TABLE, value=idempotency.table.table_name)
        CfnOutput(self, outputs.PREFIX, value=prefix)
        CfnOutput(self, outputs.OUTBOX_TABLE, value=self.outbox.table.table_name)
        CfnOutput(self, outputs.DEDUPE_TABLE, value=dedupe.table.table_name)
        CfnOutput(self, outputs.RELAY_DLQ_URL, value=relay_dlq.queue.queue_url)
        CfnOutput(self, outputs.OPS_AUDIT_TABLE, value=operations.audit_table.table_name)
        CfnOutput(self, outputs.RESUME_SCHEDULE_GROUP, value=operations.schedule_group.schedule_group_name)
        CfnOutput(self, outputs.RESUME_SCHEDULE_ROLE, value=operations.resume_role.role_arn)
        CfnOutput(self, outputs.RESUME_FUNCTION, value=operations.resume_function.function_arn)
        CfnOutput(self, outputs.OPERATOR_POLICY, value=operations.operator_policy.managed_policy_arn)
        CfnOutput(self, outputs.SCHEDULE_RUNS_TABLE, value=worker_tables.schedule_runs.table_name)
        CfnOutput(self, outputs.LEASES_TABLE, value=worker_tables.leases.table_name)
        CfnOutput(self, outputs.LIMITS_TABLE, value=worker_tables.limits.table_name)
        CfnOutput(self, outputs.LEDGER_TABLE, value=worker_tables.ledger.table_name)
        if self.schedules is not None:
            CfnOutput(self, outputs.SCHEDULE_GROUP, value=self.schedules.group.schedule_group_name)
            CfnOutput(self, outputs.SCHEDULES_DLQ_URL, value=self.schedules.dlq.queue_url)
        for name, job_queue in self.job_queues.items():
            for resource, value in (
                (outputs.QUEUE_URL, job_queue.queue.queue_url),
                (outputs.DLQ_URL, job_queue.dlq.queue_url),
                (outputs.WORKER_FUNCTION, job_queue.function.function_name),
                (outputs.WORKER_LOG_GROUP, job_queue.log_group.log_group_name),
                (outputs.EVENT_SOURCE_MAPPING, job_queue.event_source.event_source_mapping_id),
            ):
                CfnOutput(self, outputs.queue_output_key(name, resource), value=value)
