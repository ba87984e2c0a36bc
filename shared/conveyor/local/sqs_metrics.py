"""The SQS metric AWS publishes and moto does not: ApproximateAgeOfOldestMessage, per queue.

`conveyor status` and the queue-age alarm read it from CloudWatch. In AWS, SQS publishes it every
minute; the embedded AWS does the same, from moto's in-process queues, to its own CloudWatch.
Only a moto running in this process can be read, so `conveyor local up` and the demo publish it;
`conveyor local work --endpoint` (moto elsewhere) does not.
"""

import logging
import threading
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

PUBLISH_EVERY_S = 60.0
NAMESPACE = "AWS/SQS"
METRIC = "ApproximateAgeOfOldestMessage"
MILLISECONDS = 1000
# Datapoints per PutMetricData call: well under the API's 1,000, and one call covers most topologies.
PUT_BATCH = 20


def oldest_ages(now: datetime) -> dict[str, float]:
    """Seconds since the oldest undeleted message was sent, per queue name (0 for an empty queue)."""
    # Imported here: moto is a development dependency, present whenever the embedded AWS runs.
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    ages = {}
    for backend in sqs_backends[DEFAULT_ACCOUNT_ID].values():
        for name, queue in backend.queues.items():
            sent = [int(str(message.sent_timestamp)) for message in list(queue._messages) if message.sent_timestamp]
            ages[name] = max(0.0, now.timestamp() - min(sent) / MILLISECONDS) if sent else 0.0
    return ages


class SqsMetricsPublisher:
    def __init__(self, cloudwatch: Any) -> None:
        self._cloudwatch = cloudwatch
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqs-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def publish(self, now: datetime | None = None) -> None:
        at = now or datetime.now(UTC)
        data = [
            {
                "MetricName": METRIC,
                "Dimensions": [{"Name": "QueueName", "Value": name}],
                "Timestamp": at,
                "Value": age,
                "Unit": "Seconds",
            }
            for name, age in oldest_ages(at).items()
        ]
        for start in range(0, len(data), PUT_BATCH):
            self._cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=data[start : start + PUT_BATCH])

    def _run(self) -> None:
        while True:
            try:
                self.publish()
            except Exception:  # a missed minute is not worth stopping the embedded AWS for
                log.exception("could not publish SQS metrics")
            if self._stopping.wait(PUBLISH_EVERY_S):
                return
