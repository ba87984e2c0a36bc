"""A queue's state at a glance: its backlog, its DLQ, and whether (and how hard) it is consumed."""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.contract.topology import Topology
from conveyor.ops.target import QueueTarget, Target

# SQS publishes ApproximateAgeOfOldestMessage every minute; look back far enough to find one.
AGE_LOOKBACK = timedelta(minutes=5)
MINUTE_S = 60


@dataclass(frozen=True)
class QueueStatus:
    name: str
    url: str
    dlq_url: str
    visible: int
    in_flight: int
    delayed: int
    oldest_age_s: float | None
    dlq_visible: int
    # DLQ entries someone holds right now (a `conveyor dlq` scan, a redrive in progress).
    dlq_in_flight: int
    paused: bool
    max_concurrency: int | None
    resume_at: str | None
    job_types: list[str]
    # What the declarations (and so the next deploy that updates the mapping) set; differs after `conveyor concurrency`.
    declared_max_concurrency: int | None = None
    # [lowest, highest] the age controller keeps max_concurrency within; None for a queue that does not scale on age.
    scale_on_age: list[int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def queue_counts(sqs: Any, url: str) -> dict[str, int]:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return {
        "visible": int(attributes["ApproximateNumberOfMessages"]),
        "in_flight": int(attributes["ApproximateNumberOfMessagesNotVisible"]),
        "delayed": int(attributes["ApproximateNumberOfMessagesDelayed"]),
    }


def oldest_age_s(cloudwatch: Any, queue_url: str, *, now: datetime | None = None) -> float | None:
    """SQS's own ApproximateAgeOfOldestMessage (the API has no such attribute); None without a datapoint."""
    end = now or datetime.now(UTC)
    points = cloudwatch.get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateAgeOfOldestMessage",
        Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
        StartTime=end - AGE_LOOKBACK,
        EndTime=end,
        Period=MINUTE_S,
        Statistics=["Maximum"],
    )["Datapoints"]
    if not points:
        return None
    return float(max(points, key=lambda point: point["Timestamp"])["Maximum"])


def queue_status(target: Target, topology: Topology, queue: QueueTarget) -> QueueStatus:
    sqs = target.clients("sqs")
    counts = queue_counts(sqs, queue.url)
    dlq = queue_counts(sqs, queue.dlq_url)
    state = target.event_sources.state(queue.name)
    return QueueStatus(
        name=queue.name,
        url=queue.url,
        dlq_url=queue.dlq_url,
        oldest_age_s=oldest_age_s(target.clients("cloudwatch"), queue.url),
        dlq_visible=dlq["visible"],
        dlq_in_flight=dlq["in_flight"],
        paused=not state.enabled,
        max_concurrency=state.max_concurrency,
        resume_at=state.resume_at.isoformat() if state.resume_at else None,
        job_types=[job.name for job in topology.job_types_on(queue.name)],
        declared_max_concurrency=topology.queue(queue.name).max_concurrency,
        scale_on_age=list(topology.queue(queue.name).scale_bounds) if topology.queue(queue.name).scale_on_age else None,
        **counts,
    )
