"""What the `conveyor` ops CLI works with in AWS: its audit table, timed-pause resumes, and its policy."""

from collections.abc import Mapping, Sequence

from aws_cdk import Acknowledgment, ArnFormat, Aws, RemovalPolicy, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from conveyor.ops.audit import AUDIT_KEY, AUDIT_TTL
from conveyor.ops.event_sources import ResumeSchedules
from conveyor.worker import effects
from infra.job_queue import JobQueue
from infra.outbox_relay import DEDUPE_RELAY_ACTIONS
from infra.timed_resume import TimedResumeFunction
from infra.worker_package import WorkerPackage

SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
# Pausing and resuming a queue is switching its event source mapping off and on.
MAPPING_ACTIONS = ("lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping")
# Inspecting a queue or DLQ, and moving messages between them (redrive, drain).
QUEUE_ACTIONS = (
    "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:SendMessage",
)
# A timed pause replaces its queue's one-time resume schedule, and `conveyor status` reads it.
SCHEDULE_ACTIONS = ("scheduler:CreateSchedule", "scheduler:GetSchedule", "scheduler:DeleteSchedule")
# Audit rows are only ever added, and read back with a scan (see conveyor.ops.audit).
AUDIT_ACTIONS = ("dynamodb:PutItem", "dynamodb:Scan")
# The redrive canary checks a redriven job's idempotency record.
IDEMPOTENCY_ACTIONS = ("dynamodb:GetItem",)
# `conveyor limits` reads the destinations' items from the limits table by key (conveyor.worker.destinations.state);
# `conveyor limits set` and `conveyor breaker open|close` change them with conditional updates, as the workers do.
LIMITS_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem")
# `conveyor reconcile` queries the effect ledger's pending index (conveyor.worker.effects), and settles
# what a destination's hook answered with a conditional update per effect.
LEDGER_ACTIONS = ("dynamodb:UpdateItem",)
LEDGER_INDEX_ACTIONS = ("dynamodb:Query",)
# `conveyor tail` follows job events in the workers' log groups.
LOG_ACTIONS = ("logs:FilterLogEvents",)
# `conveyor stats` reads job metrics (GetMetricData); `conveyor status` a queue's oldest-message age
# (GetMetricStatistics). Neither has resource-level permissions.
METRIC_ACTIONS = ("cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics")


class Operations(Construct):
    """Least privilege for operators: one managed policy, scoped to this stack's queues and mappings.

    A timed pause leaves a one-time EventBridge Scheduler schedule that invokes the timed-resume
    function, which re-enables the mapping and audits it, so the resume happens (and is recorded)
    even if the operator's laptop is closed by then.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        job_queues: Mapping[str, JobQueue],
        idempotency_table: dynamodb.ITable,
        limits_table: dynamodb.ITable,
        ledger_table: dynamodb.ITable,
        own_dlq_arns: Sequence[str],
        dedupe_table: dynamodb.ITable,
        package: WorkerPackage,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        # Who paused, redrove or discarded what must outlive the stack: retained, and
        # protected from deletion by hand too.
        self.audit_table = dynamodb.Table(
            self,
            "AuditTable",
            partition_key=dynamodb.Attribute(name=AUDIT_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=AUDIT_TTL,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # The group holds only pending resumes, which mean nothing once the stack's mappings
        # are gone; a retained group would also block redeploying under the same name.
        self.schedule_group = scheduler.ScheduleGroup(
            self, "ResumeSchedules", schedule_group_name=f"{prefix}-ops", removal_policy=RemovalPolicy.DESTROY
        )
        mapping_arns = [job_queue.event_source.event_source_mapping_arn for job_queue in job_queues.values()]
        self.resume_role = iam.Role(
            self,
            "ResumeRole",
            description="Assumed by the one-time schedules that end a timed pause of a Conveyor queue",
            assumed_by=iam.ServicePrincipal(
                SCHEDULER_PRINCIPAL,
                # Only schedules in this account's ops group (confused-deputy protection).
                conditions={
                    "StringEquals": {
                        "aws:SourceAccount": Aws.ACCOUNT_ID,
                        "aws:SourceArn": self.schedule_group.schedule_group_arn,
                    }
                },
            ),
        )
        self.resume_function = TimedResumeFunction(
            self,
            "TimedResume",
            package=package,
            audit_table=self.audit_table,
            mapping_arns=mapping_arns,
            log_retention=log_retention,
        ).function
        # The unqualified function only (grant_invoke would add its versions, a wildcard): Scheduler invokes that.
        self.resume_role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.resume_function.function_arn])
        )
        schedules = ResumeSchedules(
            group=self.schedule_group.schedule_group_name,
            role_arn=self.resume_role.role_arn,
            prefix=prefix,
            function_arn=self.resume_function.function_arn,
        )
        self.operator_policy = self._operator_policy(
            prefix=prefix,
            log_group_arns=[job_queue.log_group.log_group_arn for job_queue in job_queues.values()],
            # The relay's and the schedules' DLQs too: `conveyor dlq ... relay|schedules` (conveyor.ops.own_dlqs).
            queue_arns=[
                arn for job_queue in job_queues.values() for arn in (job_queue.queue.queue_arn, job_queue.dlq.queue_arn)
            ]
            + list(own_dlq_arns),
            mapping_arns=mapping_arns,
            schedule_arns=[
                Stack.of(self).format_arn(
                    service="scheduler",
                    resource="schedule",
                    resource_name=f"{schedules.group}/{schedules.name(name)}",
                    arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                )
                for name in job_queues
            ],
            idempotency_table=idempotency_table,
            limits_table=limits_table,
            ledger_table=ledger_table,
            dedupe_table=dedupe_table,
        )

    def _operator_policy(
        self,
        *,
        prefix: str,
        log_group_arns: list[str],
        queue_arns: list[str],
        mapping_arns: list[str],
        schedule_arns: list[str],
        idempotency_table: dynamodb.ITable,
        limits_table: dynamodb.ITable,
        ledger_table: dynamodb.ITable,
        dedupe_table: dynamodb.ITable,
    ) -> iam.ManagedPolicy:
        """A named policy, so an IAM Identity Center permission set can attach it by name."""
        policy = iam.ManagedPolicy(
            self,
            "OperatorPolicy",
            managed_policy_name=f"{prefix}-operator",
            description="What the Conveyor `conveyor` CLI needs to operate this stack's queues and destinations, "
            "and nothing more",
            statements=[
                # The CLI finds every resource through the stack's outputs.
                iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[Aws.STACK_ID]),
                iam.PolicyStatement(actions=list(QUEUE_ACTIONS), resources=queue_arns),
                iam.PolicyStatement(actions=list(MAPPING_ACTIONS), resources=mapping_arns),
                iam.PolicyStatement(actions=list(SCHEDULE_ACTIONS), resources=schedule_arns),
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.resume_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": SCHEDULER_PRINCIPAL}},
                ),
                iam.PolicyStatement(actions=list(AUDIT_ACTIONS), resources=[self.audit_table.table_arn]),
                iam.PolicyStatement(actions=list(IDEMPOTENCY_ACTIONS), resources=[idempotency_table.table_arn]),
                iam.PolicyStatement(actions=list(LIMITS_ACTIONS), resources=[limits_table.table_arn]),
                iam.PolicyStatement(actions=list(LEDGER_ACTIONS), resources=[ledger_table.table_arn]),
                iam.PolicyStatement(
                    actions=list(LEDGER_INDEX_ACTIONS),
                    resources=[f"{ledger_table.table_arn}/index/{effects.PENDING_INDEX}"],
                ),
                # A relay DLQ redrive relays its record again, claiming its jobs' dedupe keys as the relay does.
                iam.PolicyStatement(actions=list(DEDUPE_RELAY_ACTIONS), resources=[dedupe_table.table_arn]),
                iam.PolicyStatement(actions=list(LOG_ACTIONS), resources=log_group_arns),
                iam.PolicyStatement(actions=list(METRIC_ACTIONS), resources=["*"]),
            ],
        )
        Validations.of(policy).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="CloudWatch GetMetricData and GetMetricStatistics support no resource-level permissions; "
                "they only read metrics.",
            )
        )
        return policy
