"""In-memory SQS and DynamoDB clients: the I/O both sides of the harness CPU benchmark run on.

They answer only the calls that benchmark makes (a producer's batch sends, the harness's visibility
changes and DLQ sends, and the four item calls of Powertools' DynamoDB persistence layer) and keep
no more than they must, so that what the measured loop spends is the code under test, not a fake
AWS (moto would be most of it). Powertools' conditional put is honoured as DynamoDB evaluates it:
an item blocks a put unless it has expired, or is INPROGRESS past its in-progress expiry.
"""

import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS
from botocore.exceptions import ClientError

Item = dict[str, dict[str, str]]


class MemorySqs:
    """Accepts every send; keeps what producers sent, so a benchmark can deliver it as SQS would."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.calls: Counter[str] = Counter()

    def get_queue_url(self, *, QueueName: str) -> dict[str, str]:  # noqa: N803 - boto3's parameter names
        self.calls["GetQueueUrl"] += 1
        return {"QueueUrl": f"https://sqs.us-east-1.amazonaws.com/000000000000/{QueueName}"}

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        self.calls["SendMessageBatch"] += 1
        self.sent.extend(Entries)
        return {"Successful": [{"Id": entry["Id"], "MessageId": str(uuid.uuid4())} for entry in Entries]}

    def send_message(self, **request: Any) -> dict[str, str]:
        self.calls["SendMessage"] += 1
        return {"MessageId": str(uuid.uuid4())}

    def change_message_visibility(self, **request: Any) -> dict[str, Any]:
        self.calls["ChangeMessageVisibility"] += 1
        return {}


def _key(key: Mapping[str, Mapping[str, str]]) -> str:
    (value,) = key.values()
    return value["S"]


class MemoryDynamoDB:
    """One table's items in a dict, behind the item calls Powertools' DynamoDBPersistenceLayer makes."""

    def __init__(self) -> None:
        self.items: dict[str, Item] = {}
        self.calls: Counter[str] = Counter()

    def get_item(self, *, Key: Item, **request: Any) -> dict[str, Any]:  # noqa: N803
        self.calls["GetItem"] += 1
        item = self.items.get(_key(Key))
        return {"Item": item} if item is not None else {}

    def put_item(
        self,
        *,
        Item: Item,  # noqa: N803
        ExpressionAttributeNames: Mapping[str, str],  # noqa: N803
        ExpressionAttributeValues: Mapping[str, Mapping[str, str]],  # noqa: N803
        **request: Any,
    ) -> dict[str, Any]:
        self.calls["PutItem"] += 1
        key = Item[ExpressionAttributeNames["#id"]]["S"]
        old = self.items.get(key)
        if old is not None and self._blocks(old, ExpressionAttributeNames, ExpressionAttributeValues):
            response: dict[str, Any] = {
                "Error": {"Code": "ConditionalCheckFailedException", "Message": "The conditional request failed"},
                "Item": old,  # ReturnValuesOnConditionCheckFailure=ALL_OLD
            }
            raise ClientError(response, "PutItem")  # type: ignore[arg-type]
        self.items[key] = dict(Item)
        return {}

    @staticmethod
    def _blocks(item: Item, names: Mapping[str, str], values: Mapping[str, Mapping[str, str]]) -> bool:
        """Not ``#expiry < :now OR (#status = :inprogress AND #in_progress_expiry < :now_in_millis)``."""
        if int(item[names["#expiry"]]["N"]) < int(values[":now"]["N"]):
            return False
        in_progress_expiry = item.get(names["#in_progress_expiry"])
        return not (
            item[names["#status"]]["S"] == STATUS_CONSTANTS["INPROGRESS"]
            and in_progress_expiry is not None
            and int(in_progress_expiry["N"]) < int(values[":now_in_millis"]["N"])
        )

    def update_item(
        self,
        *,
        Key: Item,  # noqa: N803
        UpdateExpression: str,  # noqa: N803
        ExpressionAttributeNames: Mapping[str, str],  # noqa: N803
        ExpressionAttributeValues: Mapping[str, dict[str, str]],  # noqa: N803
        **request: Any,
    ) -> dict[str, Any]:
        """``SET #a = :a, #b = :b``: the only kind of update the persistence layer makes."""
        self.calls["UpdateItem"] += 1
        item = self.items.setdefault(_key(Key), dict(Key))
        for assignment in UpdateExpression.removeprefix("SET ").split(","):
            name, value = (part.strip() for part in assignment.split("="))
            item[ExpressionAttributeNames[name]] = ExpressionAttributeValues[value]
        return {}

    def delete_item(self, *, Key: Item, **request: Any) -> dict[str, Any]:  # noqa: N803
        self.calls["DeleteItem"] += 1
        self.items.pop(_key(Key), None)
        return {}
