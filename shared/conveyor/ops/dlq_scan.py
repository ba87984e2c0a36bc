"""Read a DLQ without consuming it.

SQS has no peek: a scan receives every message and holds it (its visibility timeout) so that
no message is seen twice, then hands back what it did not delete. The hold is short and is
renewed while an operation still works on the entries, so a scan that dies (kill -9) gives
everything back within ``HOLD`` rather than hiding it for hours.

A DLQ has no redrive policy, so the receives a scan adds are harmless. On a FIFO DLQ, SQS
hands out nothing more of a message group while part of it is held, so a scan may see only
the head of each group; it then says it was truncated, and running the command again goes on.
A hold that could not be renewed is an error: an entry whose hold lapsed may be handed to
someone else, and deleting it with an old receipt handle may silently fail.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from conveyor.contract import limits
from conveyor.contract.errors import ConveyorError
from conveyor.ops.dlq_entries import DlqEntry

HOLD = timedelta(minutes=2)
# How long a loop may wait between renewals, whatever it is waiting for.
KEEP_EVERY_S = 5.0
# Renew held entries once this much of the hold has passed.
RENEW_AFTER = HOLD / 2
# At most this many entries per run: SQS limits in-flight messages (120,000 on a standard queue,
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html).
MAX_SCAN = 20_000
# Long polls that must come back empty before the DLQ counts as read to the end.
EMPTY_RECEIVES_TO_END = 2
# A long poll, as SQS samples its servers on a short one: an empty short receive does not mean an empty queue.
RECEIVE_WAIT_S = 1


class HoldLostError(ConveyorError):
    """Held entries could not be kept hidden: stop before acting on them with stale handles."""


class DlqScan:
    """Entries held by this process; ``close()`` (or leaving the ``with``) returns what is left."""

    def __init__(
        self,
        sqs: Any,
        url: str,
        *,
        wait_s: int = RECEIVE_WAIT_S,
        parse: Callable[[Mapping[str, Any]], DlqEntry] = DlqEntry.of,
    ) -> None:
        self._sqs = sqs
        self._url = url
        # How a message reads as an entry: a job DLQ's, or the relay's or the schedules' (conveyor.ops.own_dlqs).
        self._parse = parse
        self._wait_s = wait_s
        self._fifo = url.endswith(limits.SQS_FIFO_SUFFIX)
        self.held: dict[str, DlqEntry] = {}
        self.truncated = False
        self._renewed = time.monotonic()

    def __enter__(self) -> "DlqScan":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_all(self) -> list[DlqEntry]:
        """Receive and hold every entry (up to MAX_SCAN), in the order SQS returned them."""
        empty = 0
        while empty < EMPTY_RECEIVES_TO_END and len(self.held) < MAX_SCAN:
            self.keep()
            messages = self._sqs.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=min(limits.SQS_MAX_BATCH_ENTRIES, MAX_SCAN - len(self.held)),
                WaitTimeSeconds=self._wait_s,
                VisibilityTimeout=int(HOLD.total_seconds()),
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            entries = [self._parse(message) for message in messages]
            # Only entries not seen before count as progress; a re-received one brings a fresh handle.
            empty = 0 if any(entry.message_id not in self.held for entry in entries) else empty + 1
            for entry in entries:
                self.held[entry.message_id] = entry
        self.truncated = len(self.held) >= MAX_SCAN or (self._fifo and self._still_visible() > 0)
        return list(self.held.values())

    def _still_visible(self) -> int:
        attributes = self._sqs.get_queue_attributes(QueueUrl=self._url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])

    def delete(self, entry: DlqEntry) -> None:
        self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=entry.receipt_handle)
        del self.held[entry.message_id]

    def release(self, entries: Iterable[DlqEntry]) -> None:
        """Make entries visible again now, and stop holding them."""
        released = [self.held.pop(entry.message_id) for entry in entries if entry.message_id in self.held]
        self._set_visibility(released, 0)

    def keep(self) -> None:
        """Renew the hold on everything still held, if it is due: call this often in long loops."""
        if time.monotonic() - self._renewed < RENEW_AFTER.total_seconds():
            return
        failed = self._set_visibility(list(self.held.values()), int(HOLD.total_seconds()))
        if failed:
            raise HoldLostError(f"could not keep {len(failed)} DLQ entries hidden ({failed[0]}); nothing more was done")
        self._renewed = time.monotonic()

    def close(self) -> None:
        """Hand back what is still held; one that cannot be handed back reappears when its hold ends."""
        self.release(list(self.held.values()))

    def _set_visibility(self, entries: list[DlqEntry], seconds: int) -> list[str]:
        """Set each entry's visibility; the failures, as ``"<message id>: <code>"``."""
        failed = []
        for start in range(0, len(entries), limits.SQS_MAX_BATCH_ENTRIES):
            chunk = entries[start : start + limits.SQS_MAX_BATCH_ENTRIES]
            response = self._sqs.change_message_visibility_batch(
                QueueUrl=self._url,
                Entries=[
                    {"Id": str(index), "ReceiptHandle": entry.receipt_handle, "VisibilityTimeout": seconds}
                    for index, entry in enumerate(chunk)
                ],
            )
            failed += [f"{chunk[int(entry['Id'])].message_id}: {entry['Code']}" for entry in response.get("Failed", [])]
        return failed


def read_entries(
    sqs: Any, url: str, *, wait_s: int = RECEIVE_WAIT_S, parse: Callable[[Mapping[str, Any]], DlqEntry] = DlqEntry.of
) -> tuple[list[DlqEntry], bool]:
    """Every entry, read and handed straight back (for listing), and whether MAX_SCAN cut the read short.

    ``wait_s=0`` reads with short polls: exact only where a receive sees every message, as in-process
    moto's does (conveyor.testing), never on SQS.
    """
    with DlqScan(sqs, url, wait_s=wait_s, parse=parse) as scan:
        return scan.read_all(), scan.truncated
