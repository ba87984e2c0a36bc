"""DynamoDB requests AWS refuses and moto (5.2) accepts, checked as AWS documents them.

moto itself refuses empty or mistyped key attributes, more than 100 transaction actions and
two actions on one item; these rules add what it lets through.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from conveyor.contract import limits
from conveyor.contract.sizes import item_bytes
from conveyor.local.strict.violation import Rule, Violation

QUOTAS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
DATA_TYPES = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html"
TRANSACT = "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html"
BATCH_WRITE = "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html"
BATCH_GET = "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html"

VALIDATION = "ValidationException"
SET_TYPES = {"SS": "string", "NS": "number", "BS": "binary"}
# The members of a request, or of a transaction action, that hold attribute values.
VALUE_MEMBERS = ("Item", "Key", "ExpressionAttributeValues")


def _empty_sets(values: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(name, set type) of every empty set in a map of attribute values, however deeply nested."""
    for name, value in values.items():
        for tag, data in value.items():
            if tag in SET_TYPES and not data:
                yield name, tag
            elif tag == "M":
                yield from _empty_sets(data)
            elif tag == "L":
                for element in data:
                    yield from _empty_sets({name: element})


def _check_values(request: Mapping[str, Any]) -> None:
    for member in VALUE_MEMBERS:
        for name, tag in _empty_sets(request.get(member) or {}):
            raise Violation(
                VALIDATION,
                f"One or more parameter values were invalid: An {SET_TYPES[tag]} set may not be empty "
                f"(attribute {name} of {member})",
                citation=DATA_TYPES,
            )


def _check_item(item: Mapping[str, Any]) -> int:
    size = item_bytes(item)
    if size > limits.DYNAMODB_MAX_ITEM_BYTES:
        raise Violation(
            VALIDATION,
            f"Item size has exceeded the maximum allowed size ({size} bytes, over {limits.DYNAMODB_MAX_ITEM_BYTES})",
            citation=QUOTAS,
        )
    return size


def put_item(params: Mapping[str, Any]) -> None:
    _check_values(params)
    _check_item(params.get("Item") or {})


def update_item(params: Mapping[str, Any]) -> None:
    """Values only: the updated item's size is known to the table alone (moto's own cap applies)."""
    _check_values(params)


def transact_write_items(params: Mapping[str, Any]) -> None:
    total = 0
    for action in params.get("TransactItems") or []:
        for operation, body in action.items():
            _check_values(body)
            # What the request carries: a Put's item, the others' key and values.
            if operation == "Put":
                total += _check_item(body.get("Item") or {})
            else:
                total += item_bytes(body.get("Key") or {}) + item_bytes(body.get("ExpressionAttributeValues") or {})
    if total > limits.DYNAMODB_MAX_TRANSACT_BYTES:
        raise Violation(
            VALIDATION,
            f"Transaction size has exceeded the maximum allowed size ({total} bytes, over "
            f"{limits.DYNAMODB_MAX_TRANSACT_BYTES})",
            citation=TRANSACT,
        )


def batch_write_item(params: Mapping[str, Any]) -> None:
    requests = [request for table in (params.get("RequestItems") or {}).values() for request in table]
    if len(requests) > limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS:
        raise Violation(
            VALIDATION,
            f"1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Map value must "
            f"satisfy constraint: [Member must have length less than or equal to "
            f"{limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS}] ({len(requests)} requests)",
            citation=BATCH_WRITE,
        )
    for request in requests:
        put = request.get("PutRequest")
        if put:
            _check_values(put)
            _check_item(put.get("Item") or {})


def batch_get_item(params: Mapping[str, Any]) -> None:
    keys = sum(len(table.get("Keys") or []) for table in (params.get("RequestItems") or {}).values())
    if keys > limits.DYNAMODB_MAX_BATCH_GET_KEYS:
        raise Violation(
            VALIDATION,
            f"Too many items requested for the BatchGetItem call ({keys}, over {limits.DYNAMODB_MAX_BATCH_GET_KEYS})",
            citation=BATCH_GET,
        )


RULES: dict[str, Rule] = {
    "PutItem": put_item,
    "UpdateItem": update_item,
    "TransactWriteItems": transact_write_items,
    "BatchWriteItem": batch_write_item,
    "BatchGetItem": batch_get_item,
}
