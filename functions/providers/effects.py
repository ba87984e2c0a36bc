"""The effects ledger: what each fake provider was asked to do and what actually took place.

One item per logical effect (``effect_key``): ``calls`` counts requests, ``applied`` counts
effects that happened. Tests and the demo read it to prove no effect happened twice.
"""

import os
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError

from conveyor.contract import naming
from conveyor.contract.declarations import Table

# Declared in functions/topology.py; the stack and the local runtime create it from there.
EFFECTS_TABLE = Table("effects", key="effect_key")
KEY_ATTRIBUTE = EFFECTS_TABLE.key


@dataclass(frozen=True)
class Effect:
    calls: int
    applied: int


class EffectsLedger:
    def __init__(self, table_name: str | None = None, client: Any = None) -> None:
        self._table_name = (
            table_name or os.environ.get(naming.table_env(EFFECTS_TABLE.name)) or naming.table_name(EFFECTS_TABLE.name)
        )
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = boto3.client("dynamodb")
        return self._client

    def call(self, effect_key: str, *, provider: str, job_id: str) -> Effect:
        """Count a request; every provider call starts here. Returns the counts including it."""
        return self._update(effect_key, provider, job_id, "ADD calls :one")

    def apply(self, effect_key: str, *, provider: str, job_id: str) -> Effect:
        """Record that the counted request's effect took place."""
        return self._update(effect_key, provider, job_id, "ADD applied :one")

    def apply_once_per_token(self, effect_key: str, token: str, *, provider: str, job_id: str) -> Effect | None:
        """Apply unless ``token`` (an Idempotency-Key) was applied for this effect before; None if it was."""
        try:
            return self._update(
                effect_key,
                provider,
                job_id,
                "ADD applied :one, tokens :token",
                condition="attribute_not_exists(tokens) OR NOT contains(tokens, :token_value)",
                extra_values={":token": {"SS": [token]}, ":token_value": {"S": token}},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return None

    def applied_with(self, effect_key: str, token: str) -> bool:
        """Whether a request carrying ``token`` (an Idempotency-Key) applied the effect, as a provider's API says."""
        item = self.client.get_item(
            TableName=self._table_name, Key={KEY_ATTRIBUTE: {"S": effect_key}}, ConsistentRead=True
        ).get("Item")
        return item is not None and token in item.get("tokens", {}).get("SS", [])

    def get(self, effect_key: str) -> Effect | None:
        item = self.client.get_item(
            TableName=self._table_name, Key={KEY_ATTRIBUTE: {"S": effect_key}}, ConsistentRead=True
        ).get("Item")
        return _effect(item) if item else None

    def _update(
        self,
        effect_key: str,
        provider: str,
        job_id: str,
        add: str,
        *,
        condition: str | None = None,
        extra_values: dict[str, Any] | None = None,
    ) -> Effect:
        request: dict[str, Any] = {
            "TableName": self._table_name,
            "Key": {KEY_ATTRIBUTE: {"S": effect_key}},
            "UpdateExpression": f"{add} SET provider = :provider, job_id = :job_id",
            "ExpressionAttributeValues": {
                ":one": {"N": "1"},
                ":provider": {"S": provider},
                ":job_id": {"S": job_id},
                **(extra_values or {}),
            },
            "ReturnValues": "ALL_NEW",
        }
        if condition:
            request["ConditionExpression"] = condition
        return _effect(self.client.update_item(**request)["Attributes"])


def _effect(item: dict[str, Any]) -> Effect:
    return Effect(calls=int(item.get("calls", {"N": "0"})["N"]), applied=int(item.get("applied", {"N": "0"})["N"]))
