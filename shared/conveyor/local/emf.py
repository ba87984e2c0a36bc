"""Locally, what CloudWatch Logs does with EMF in AWS: turn the workers' EMF lines into metrics.

The forwarder stands in for stdout in the local runtime. Every line still goes where it went
(EMF lines are log bytes in AWS too; the console drops them: conveyor.local.console); EMF
documents are also published to the embedded CloudWatch, and their raw values appended to a
file, since moto computes no percentiles and `conveyor stats` must compute them from those.
"""

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conveyor.local.text_sink import TextSink

MILLISECONDS = 1000
RAW_VALUES_FILE = Path(".cache/local/metrics.jsonl")


def emf_document(line: str) -> dict[str, Any] | None:
    if not line.startswith("{") or '"_aws"' not in line:
        return None
    try:
        document = json.loads(line)
    except ValueError:
        return None
    return document if isinstance(document, dict) and "_aws" in document else None


def metric_data(document: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """An EMF document as (namespace, PutMetricData entries)."""
    metadata = document["_aws"]
    timestamp = datetime.fromtimestamp(metadata["Timestamp"] / MILLISECONDS, tz=UTC)
    entries = []
    namespace = ""
    for directive in metadata["CloudWatchMetrics"]:
        namespace = directive["Namespace"]
        for dimension_names in directive["Dimensions"]:
            dimensions = [{"Name": name, "Value": str(document[name])} for name in dimension_names]
            for metric in directive["Metrics"]:
                raw = document[metric["Name"]]
                values = [float(v) for v in (raw if isinstance(raw, list) else [raw])]
                entries.append(
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dimensions,
                        "Values": values,
                        "Counts": [1.0] * len(values),
                        "Unit": metric.get("Unit", "None"),
                        "Timestamp": timestamp,
                    }
                )
    return namespace, entries


class EmfForwarder:
    """A stdout that passes every line through and forwards EMF documents to CloudWatch."""

    def __init__(self, passthrough: TextSink, cloudwatch: Any, raw_values: Path = RAW_VALUES_FILE) -> None:
        self._passthrough = passthrough
        self._cloudwatch = cloudwatch
        self._raw_values = raw_values
        raw_values.parent.mkdir(parents=True, exist_ok=True)
        self._pending = threading.local()
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        buffered = getattr(self._pending, "text", "") + text
        *lines, self._pending.text = buffered.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def flush(self) -> None:
        self._passthrough.flush()

    def isatty(self) -> bool:
        return False

    def _line(self, line: str) -> None:
        with self._lock:
            self._passthrough.write(line + "\n")
        document = emf_document(line)
        if document is None:
            return
        namespace, entries = metric_data(document)
        self._cloudwatch.put_metric_data(Namespace=namespace, MetricData=entries)
        with self._lock, self._raw_values.open("a") as raw:
            for entry in entries:
                record = {
                    "namespace": namespace,
                    "name": entry["MetricName"],
                    "dimensions": {d["Name"]: d["Value"] for d in entry["Dimensions"]},
                    "timestamp": entry["Timestamp"].isoformat(),
                    "values": entry["Values"],
                }
                raw.write(json.dumps(record) + "\n")
