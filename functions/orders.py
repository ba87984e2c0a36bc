"""Orders: a domain table whose every order gets exactly one charge, however it was written.

Two kinds of producer place orders:
- one that uses the SDK writes the row and its ``charge_order`` job in one transaction
  (``place_order``). The row says PLACED, so the stream rule leaves it alone: its job is
  already in the transaction;
- one that only writes rows (any language, a plain PutItem) writes status NEW, and the stream
  rule ``charge-new-orders`` turns the inserted row into the job.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from conveyor.contract.declarations import StreamImage, StreamRule, Table
from conveyor.sdk.client import JobClient
from conveyor.sdk.prepare import JobRequest
from functions.jobs.charge_order import ChargeOrder, charge_order

# Declared in functions/topology.py: its stream feeds the rule below.
ORDERS_TABLE = Table("orders", key="order_id")
ORDER_ID = ORDERS_TABLE.key
STATUS = "status"
AMOUNT_CENTS = "amount_cents"
CURRENCY = "currency"
# Written by producers that only write rows: the stream rule charges the order.
NEW = "NEW"
# Written by place_order, with the charge in the same transaction: the stream rule skips it.
PLACED = "PLACED"
# A second placement of the same order (a retry after a lost response) fails, with its job.
NEW_ORDER_ONLY = f"attribute_not_exists({ORDER_ID})"
CHARGE_JOB_ID_PREFIX = "charge-"


@dataclass(frozen=True)
class Order:
    order_id: str
    amount_cents: int
    currency: str

    @classmethod
    def from_image(cls, item: StreamImage) -> "Order":
        """The order a stream record's new image holds; its numbers come as Decimal."""
        return cls(order_id=str(item[ORDER_ID]), amount_cents=_whole(item[AMOUNT_CENTS]), currency=str(item[CURRENCY]))

    def item(self, status: str) -> dict[str, Any]:
        """The order row in DynamoDB's wire format, as PutItem and TransactWriteItems take it."""
        return {
            ORDER_ID: {"S": self.order_id},
            STATUS: {"S": status},
            AMOUNT_CENTS: {"N": str(self.amount_cents)},
            CURRENCY: {"S": self.currency},
        }

    def placement(self, table_name: str) -> dict[str, Any]:
        """The transaction's write of the row, as PLACED: it fails if the order exists."""
        return {"Put": {"TableName": table_name, "Item": self.item(PLACED), "ConditionExpression": NEW_ORDER_ONLY}}

    def charge(self) -> JobRequest:
        """The order's charge; its id follows from the order, so a retried placement cannot add a second job."""
        payload = ChargeOrder(order_id=self.order_id, amount_cents=self.amount_cents, currency=self.currency)
        return JobRequest(charge_order, payload, job_id=CHARGE_JOB_ID_PREFIX + self.order_id)


def place_order(client: JobClient, table_name: str, order: Order) -> str:
    """Commit the order row and its charge together, and return the job id.

    Raises TransactionConditionError, with nothing written, if the order was placed before.
    """
    (job_id,) = client.transact([order.placement(table_name)], [order.charge()])
    return job_id


def is_new(item: StreamImage) -> bool:
    return item.get(STATUS) == NEW


def charge_payload(item: StreamImage) -> Mapping[str, Any]:
    order = Order.from_image(item)
    return {ORDER_ID: order.order_id, AMOUNT_CENTS: order.amount_cents, CURRENCY: order.currency}


def _whole(value: Any) -> int:
    """A whole number from a stream image; a fraction raises (the relay dead-letters the row) rather than rounds."""
    if not isinstance(value, Decimal) or value != value.to_integral_value():
        raise ValueError(f"not a whole number: {value!r}")
    return int(value)


CHARGE_NEW_ORDERS = StreamRule(
    "charge-new-orders", table=ORDERS_TABLE.name, job=charge_order.name, when=is_new, payload=charge_payload
)
