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
SQS_MAX_MESSAGE_ATTRIBUTES = 10
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
SQS_MAX_BATCH_ENTRIES = 10
SQS_MAX_BATCH_BYTES = 1_048_576

# https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html
ESM_MAX_BATCH_SIZE_STANDARD = 10_000
ESM_MAX_BATCH_SIZE_FIFO = 10
ESM_MAX_BATCH_SIZE_WITHOUT_WINDOW = 10
ESM_MAX_BATCHING_WINDOW = timedelta(seconds=300)
ESM_MIN_MAX_CONCURRENCY = 2
ESM_MAX_MAX_CONCURRENCY = 1_000
# AWS recommends a visibility timeout of at least six times the function timeout, so
# that Lambda's own retries on throttling fit before the message becomes visible again.
VISIBILITY_TO_TIMEOUT_RATIO = 6
# AWS recommends maxReceiveCount of at least 5 so throttled batches are not dead-lettered.
MIN_MAX_RECEIVE_COUNT = 5

# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
LAMBDA_MAX_TIMEOUT = timedelta(minutes=15)
LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10_240

# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
DYNAMODB_MAX_TRANSACT_ITEMS = 100
# "4 MB" of items in all; DynamoDB's units are binary (an item's 400 KB is 409,600 bytes).
DYNAMODB_MAX_TRANSACT_BYTES = 4 * 1024 * 1024
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
DYNAMODB_MAX_ITEM_BYTES = 400 * 1024
# An item's size counts each attribute's name and value; a number takes at most 21 bytes:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
DYNAMODB_MAX_NUMBER_BYTES = 21
