"""Sizes as AWS counts them: an SQS message with its attributes, a DynamoDB item in wire format.

The SDK checks its requests with these before it sends them, and the local runtime's strict
mode (conveyor.local.strict) rejects with them what AWS would reject, so both count alike.
"""

import base64
from collections.abc import Mapping
from typing import Any

# SQS counts the body and, for each message attribute, its name, data type and value:
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html

# DynamoDB counts each attribute's name (UTF-8 bytes) plus its value:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
CONTAINER_OVERHEAD = 3  # a List or a Map
ELEMENT_OVERHEAD = 1  # each element of a List or a Map
NUMBER_OVERHEAD = 1  # on top of one byte per two significant digits
FLAG_SIZE = 1  # a Boolean or a Null


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def blob_bytes(data: bytes | str) -> int:
    """A binary value: raw bytes from an SDK call, or base64 text as it travels in a JSON request."""
    if isinstance(data, bytes):
        return len(data)
    try:
        return len(base64.b64decode(data, validate=True))
    except ValueError:
        return utf8_bytes(data)


def attribute_bytes(name: str, value: Mapping[str, Any]) -> int:
    """One SQS message attribute: name, data type and value."""
    data = value.get("BinaryValue")
    size = blob_bytes(data) if data is not None else utf8_bytes(value.get("StringValue") or "")
    return utf8_bytes(name) + utf8_bytes(value.get("DataType", "")) + size


def message_bytes(body: str, attributes: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """An SQS message as its size limit counts it (message system attributes such as AWSTraceHeader do not count)."""
    return utf8_bytes(body) + sum(attribute_bytes(name, value) for name, value in (attributes or {}).items())


def item_bytes(item: Mapping[str, Any]) -> int:
    """A DynamoDB item (or a map's contents) in wire format, as DynamoDB counts it."""
    return sum(utf8_bytes(name) + value_bytes(value) for name, value in item.items())


def value_bytes(value: Mapping[str, Any]) -> int:
    """One attribute value in wire format, such as ``{"S": "text"}`` or ``{"N": "5"}``."""
    if len(value) != 1:
        raise ValueError("an attribute value holds exactly one type, as {'S': 'text'} or {'N': '5'}")
    ((tag, data),) = value.items()
    match tag:
        case "S":
            return utf8_bytes(data)
        case "N":
            return number_bytes(data)
        case "B":
            return blob_bytes(data)
        case "SS":
            return sum(map(utf8_bytes, data))
        case "NS":
            return sum(map(number_bytes, data))
        case "BS":
            return sum(map(blob_bytes, data))
        case "L":
            return CONTAINER_OVERHEAD + sum(ELEMENT_OVERHEAD + value_bytes(element) for element in data)
        case "M":
            return CONTAINER_OVERHEAD + ELEMENT_OVERHEAD * len(data) + item_bytes(data)
        case _:  # BOOL or NULL
            return FLAG_SIZE


def number_bytes(text: str) -> int:
    """One byte per two significant digits, plus one: leading and trailing zeros, sign and exponent are not stored."""
    mantissa = text.strip().lstrip("+-").lower().split("e", 1)[0].replace(".", "")
    digits = len(mantissa.strip("0")) or 1
    return (digits + 1) // 2 + NUMBER_OVERHEAD
