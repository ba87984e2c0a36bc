"""Lambda event factories, shaped like the real samples AWS delivers (see docs/testing.md)."""

import hashlib
import json
import uuid
from typing import Any

REGION = "us-east-1"
ACCOUNT = "123456789012"


def sqs_record(
    body: str | dict[str, Any],
    *,
    queue: str = "conveyor-default",
    receive_count: int = 1,
    sent_timestamp_ms: int = 1_700_000_000_000,
    message_attributes: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """One SQS record as the Lambda event source mapping delivers it: attributes are strings."""
    text = body if isinstance(body, str) else json.dumps(body)
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": f"AQEB{uuid.uuid4().hex}",
        "body": text,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(sent_timestamp_ms),
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": str(sent_timestamp_ms + 2),
        },
        "messageAttributes": message_attributes or {},
        "md5OfBody": hashlib.md5(text.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}",
        "awsRegion": REGION,
    }


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}
