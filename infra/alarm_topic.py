"""The one SNS topic every Conveyor alarm notifies."""

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct


class AlarmTopic(Construct):
    """An encrypted, TLS-only topic that CloudWatch alarms can publish to.

    CloudWatch cannot publish to a topic encrypted with the AWS-managed ``aws/sns`` key,
    so the topic has its own rotating key that grants CloudWatch just what it needs.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Encrypts Conveyor alarm notifications",
            enable_key_rotation=True,
        )
        self.key.grant(
            iam.ServicePrincipal("cloudwatch.amazonaws.com"),
            "kms:Decrypt",
            "kms:GenerateDataKey*",
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Conveyor alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
