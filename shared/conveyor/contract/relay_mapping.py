"""The stream relays' event source mapping settings, read by the stack and the local stream poller alike.

Lambda's defaults for a DynamoDB stream are infinite retries and an infinite record age: one
record the relay cannot handle would hold its shard for the stream's whole 24-hour retention.
These bound both, split a failing batch to isolate the bad record, and send what is given up
on to the relay DLQ (as metadata: Lambda's on-failure record names the shard and sequence
range, not the item). Ranges: https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html
"""

from datetime import timedelta
from typing import Any

# The relay function's timeout: it bounds a stuck send, and the mapping then retries the batch.
FUNCTION_TIMEOUT = timedelta(seconds=60)
# Records per invocation: Lambda's default for streams (at most 10,000). The relay sends them
# to SQS in SendMessageBatch chunks of 10, so 100 records are at most 10 calls.
BATCH_SIZE = 100
# Retries of a failing batch before Lambda gives up on it (0 to 10,000; -1, the default, is
# infinite). Splitting a batch in two does not use up a retry.
MAX_RETRY_ATTEMPTS = 10
# Records older than this go to the on-failure destination instead of the function (60 s to
# 7 days; -1, the default, is infinite). Well inside the stream's 24 h, so the DLQ's metadata
# still points at a record that can be re-read.
MAX_RECORD_AGE = timedelta(hours=6)
# On a function error, split the batch in two and retry each half: a poison record ends up alone.
BISECT_ON_ERROR = True
# From the oldest record the stream holds: a relay deployed after the first writes still sends them.
STARTING_POSITION = "TRIM_HORIZON"
# One concurrent batch per shard keeps a shard's records in order (1 to 10).
PARALLELIZATION_FACTOR = 1
# Only new items are jobs: an update or a TTL delete never enqueues anything.
EVENT_NAME = "INSERT"
# The relay returns batchItemFailures with SequenceNumbers; Lambda retries from the lowest one,
# so the records after it are sent again (the relay's sends carry the job id for that reason).
REPORT_BATCH_ITEM_FAILURES = True


def filter_pattern() -> dict[str, Any]:
    """The mapping's event filter, as Lambda's FilterCriteria pattern: INSERT records only."""
    return {"eventName": [EVENT_NAME]}


def mapping_properties() -> dict[str, Any]:
    """Every setting above in the template's terms (AWS::Lambda::EventSourceMapping), the filter pattern decoded."""
    properties: dict[str, Any] = {
        "BatchSize": BATCH_SIZE,
        "MaximumRetryAttempts": MAX_RETRY_ATTEMPTS,
        "MaximumRecordAgeInSeconds": int(MAX_RECORD_AGE.total_seconds()),
        "BisectBatchOnFunctionError": BISECT_ON_ERROR,
        "StartingPosition": STARTING_POSITION,
        "ParallelizationFactor": PARALLELIZATION_FACTOR,
        "FilterCriteria": {"Filters": [{"Pattern": filter_pattern()}]},
    }
    if REPORT_BATCH_ITEM_FAILURES:
        properties["FunctionResponseTypes"] = ["ReportBatchItemFailures"]
    return properties
