"""AWS service limits that declarations are checked against, in one place.

Each value cites the page it comes from, so a limit that AWS raises is changed here once.
"""

from datetime import timedelta

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html
SQS_MIN_RETENTION = timedelta(seconds=60)
SQS_MAX_RETENTION = timedelta(days=14)
SQS_MAX_VISIBILITY_TIMEOUT = timedelta(hours=12)
SQS_MAX_QUEUE_NAME_LENGTH = 80
SQS_FIFO_SUFFIX = ".fifo"
# Body plus message attributes, in bytes.
SQS_MAX_MESSAGE_BYTES = 1_048_576
SQS_MAX_DELAY = timedelta(minutes=15)
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
SQS_MAX_MESSAGE_ATTRIBUTES = 10
# Conveyor's own: the room a DLQ entry's attributes take beside its body (conveyor.worker.dead_letter: ten
# names and types, an error of at most 1,024 characters at up to 4 bytes each, short values), so a
# job whose body fits max_payload_bytes can always be dead-lettered with its reason.
DEAD_LETTER_ATTRIBUTE_BYTES = 8 * 1024
MAX_PAYLOAD_BYTES = SQS_MAX_MESSAGE_BYTES - DEAD_LETTER_ATTRIBUTE_BYTES
SQS_MAX_ATTRIBUTE_NAME_LENGTH = 256
# Letters, digits, underscore, hyphen and period; no leading, trailing or doubled period.
SQS_ATTRIBUTE_NAME_PATTERN = r"(?!\.)(?!.*\.\.)[A-Za-z0-9_.-]+(?<!\.)"
# Prefixes SQS keeps for itself, in any case.
SQS_RESERVED_ATTRIBUTE_PREFIXES = ("aws.", "amazon.")
SQS_ATTRIBUTE_DATA_TYPES = ("String", "Number", "Binary")
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
# The characters a body may hold (XML 1.0's): #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.
SQS_BODY_CHARACTERS = "\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff"
SQS_MAX_GROUP_ID_LENGTH = 128
SQS_MAX_DEDUPLICATION_ID_LENGTH = 128
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
SQS_MAX_BATCH_ENTRIES = 10
SQS_MAX_BATCH_BYTES = 1_048_576
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatchRequestEntry.html
SQS_BATCH_ENTRY_ID_PATTERN = r"[A-Za-z0-9_-]{1,80}"
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html
SQS_MAX_RECEIVE_MESSAGES = 10
SQS_MAX_WAIT = timedelta(seconds=20)
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html
SQS_MAX_MOVE_RATE = 500

# https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html
ESM_MAX_BATCH_SIZE_STANDARD = 10_000
ESM_MAX_BATCH_SIZE_FIFO = 10
ESM_MAX_BATCH_SIZE_WITHOUT_WINDOW = 10
ESM_MAX_BATCHING_WINDOW = timedelta(seconds=300)
# An SQS mapping's ScalingConfig.MaximumConcurrency, for standard and FIFO queues alike (on FIFO, the active
# message groups cap concurrency too): https://docs.aws.amazon.com/lambda/latest/api/API_ScalingConfig.html
ESM_MIN_MAX_CONCURRENCY = 2
ESM_MAX_MAX_CONCURRENCY = 1_000
# AWS recommends a visibility timeout of at least six times the function timeout, so
# that Lambda's own retries on throttling fit before the message becomes visible again.
VISIBILITY_TO_TIMEOUT_RATIO = 6
# AWS recommends maxReceiveCount of at least 5 so throttled batches are not dead-lettered.
MIN_MAX_RECEIVE_COUNT = 5

# https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html
# "Lambda polls shards in your DynamoDB stream for records at a base rate of 4 times per second."
LAMBDA_STREAM_POLL_INTERVAL = timedelta(milliseconds=250)

# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
LAMBDA_MAX_TIMEOUT = timedelta(minutes=15)
LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10_240

# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
DYNAMODB_MAX_TRANSACT_ITEMS = 100
# "4 MB" of items in all; DynamoDB's units are binary (an item's 400 KB is 409,600 bytes).
DYNAMODB_MAX_TRANSACT_BYTES = 4 * 1024 * 1024
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
# Counted as conveyor.contract.sizes.item_bytes counts it.
DYNAMODB_MAX_ITEM_BYTES = 400 * 1024
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html
DYNAMODB_MAX_BATCH_WRITE_ITEMS = 25
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
DYNAMODB_MAX_BATCH_GET_KEYS = 100

# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html
SCHEDULER_NAME_PATTERN = r"[0-9a-zA-Z_.-]{1,64}"
SCHEDULER_MAX_NAME_LENGTH = 64
SCHEDULER_MIN_FLEXIBLE_WINDOW = timedelta(minutes=1)
SCHEDULER_MAX_FLEXIBLE_WINDOW = timedelta(minutes=1440)
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_RetryPolicy.html
SCHEDULER_MAX_RETRY_ATTEMPTS = 185
SCHEDULER_MIN_EVENT_AGE = timedelta(seconds=60)
SCHEDULER_MAX_EVENT_AGE = timedelta(hours=24)
# A schedule without a RetryPolicy gets these (the maximums), then its DLQ:
# https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-retry-policy.html
SCHEDULER_DEFAULT_RETRY_ATTEMPTS = SCHEDULER_MAX_RETRY_ATTEMPTS
SCHEDULER_DEFAULT_EVENT_AGE = SCHEDULER_MAX_EVENT_AGE

# https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutLogEvents.html
# "The maximum batch size is 1,048,576 bytes. This size is calculated as the sum of all event
# messages in UTF-8, plus 26 bytes for each log event." "The maximum number of log events in a batch is 10,000."
LOGS_MAX_BATCH_BYTES = 1_048_576
LOGS_EVENT_OVERHEAD_BYTES = 26
LOGS_MAX_BATCH_EVENTS = 10_000

# https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
# "For alarms with a period of less than one hour (3,600 seconds), the total evaluation period can't
# be longer than one day (86,400 seconds)": period x EvaluationPeriods. Conveyor's alarms use 1-minute periods.
CLOUDWATCH_MAX_SHORT_PERIOD_RANGE = timedelta(days=1)

# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-partition-sort-keys
# "The maximum length of a partition key value is 2048 bytes."
DYNAMODB_MAX_PARTITION_KEY_BYTES = 2048
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-expression-parameters
# "The maximum length of any expression string is 4 KB."
DYNAMODB_MAX_EXPRESSION_BYTES = 4 * 1024
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/provisioned-capacity-mode.html
# "One write request unit represents one write for an item up to 1 KB in size"; larger items take more.
DYNAMODB_WRITE_UNIT_BYTES = 1024
