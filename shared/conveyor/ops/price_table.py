"""The dated AWS price table `conveyor cost` reads: data in one JSON file per region, never code.

A price changes when AWS changes it, not when Conveyor does: the table is edited (or another
region's written beside it, and passed with ``--prices``) without touching the model. Each entry
names the AWS pricing page it was read from; a volume-tiered price lists its tiers.
"""

import math
from datetime import date
from enum import StrEnum
from importlib.resources import files
from importlib.resources.abc import Traversable
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conveyor.contract.envelope import summarize_validation_error
from conveyor.contract.errors import ConveyorError

DEFAULT_REGION = "us-east-1"
# AWS's own pages only: a price without its source cannot be checked when AWS changes it.
PRICING_PAGE = r"^https://(aws\.amazon\.com|docs\.aws\.amazon\.com)/"
M = TypeVar("M", bound=BaseModel)


class CostDataError(ConveyorError):
    """Data an estimate needs is missing or malformed: a profile, a price table, the observed metrics."""


class Service(StrEnum):
    LAMBDA = "Lambda"
    SQS = "SQS"
    DYNAMODB = "DynamoDB"
    CLOUDWATCH = "CloudWatch"
    XRAY = "X-Ray"


class Meter(StrEnum):
    """A quantity AWS bills, named as the price table names its price; the prefix is the service."""

    LAMBDA_REQUESTS = "lambda_requests"
    LAMBDA_GB_SECONDS = "lambda_arm64_gb_seconds"
    SQS_STANDARD_REQUESTS = "sqs_standard_requests"
    SQS_FIFO_REQUESTS = "sqs_fifo_requests"
    DYNAMODB_WRITE_UNITS = "dynamodb_write_request_units"
    DYNAMODB_READ_UNITS = "dynamodb_read_request_units"
    DYNAMODB_STREAM_READS = "dynamodb_streams_reads_by_lambda"
    DYNAMODB_STORAGE_GB = "dynamodb_storage"
    DYNAMODB_BACKUP_GB = "dynamodb_point_in_time_recovery"
    CUSTOM_METRICS = "cloudwatch_custom_metrics"
    ALARM_METRICS = "cloudwatch_alarm_metrics"
    LOG_GB_INGESTED = "cloudwatch_lambda_logs_ingestion"
    LOG_GB_STORED = "cloudwatch_logs_storage"
    TRACES_RECORDED = "xray_traces_recorded"
    TRACES_SCANNED = "xray_traces_scanned"

    @property
    def service(self) -> Service:
        return _SERVICES[self.value.partition("_")[0]]


_SERVICES = {
    "lambda": Service.LAMBDA,
    "sqs": Service.SQS,
    "dynamodb": Service.DYNAMODB,
    "cloudwatch": Service.CLOUDWATCH,
    "xray": Service.XRAY,
}


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Tier(_Data):
    """Units up to ``up_to`` a month (counted from the first), at ``usd`` per the price's ``per``; None: no end."""

    up_to: Annotated[float, Field(gt=0)] | None = None
    usd: Annotated[float, Field(ge=0)]


class Price(_Data):
    """``usd`` per ``per`` units, or by volume ``tiers``; ``url`` is the AWS page that states it."""

    unit: str
    per: Annotated[float, Field(gt=0)] = 1.0
    usd: Annotated[float, Field(ge=0)] | None = None
    tiers: tuple[Tier, ...] = ()
    url: Annotated[str, Field(pattern=PRICING_PAGE)]
    note: str = ""

    @model_validator(mode="after")
    def _one_schedule(self) -> Self:
        if (self.usd is None) == (not self.tiers):
            raise ValueError("give either usd or tiers")
        if self.tiers:
            *bounded, last = self.tiers
            bounds = [tier.up_to for tier in bounded]
            if last.up_to is not None or any(b is None or a is None or a >= b for a, b in pairwise([0.0, *bounds])):
                raise ValueError("tiers need rising up_to bounds, and none on the last")
        return self

    def cost(self, quantity: float) -> float:
        """The month's charge for ``quantity`` units, each tier's units at that tier's price."""
        tiers = self.tiers or (Tier(usd=self.usd or 0.0),)
        charge, floor = 0.0, 0.0
        for tier in tiers:
            ceiling = math.inf if tier.up_to is None else tier.up_to
            charge += max(0.0, min(quantity, ceiling) - floor) * tier.usd / self.per
            floor = ceiling
        return charge


class PriceTable(_Data):
    """Every price the model uses, for one region, as AWS listed them on ``as_of``."""

    region: str
    as_of: date
    currency: Literal["USD"]
    prices: dict[Meter, Price]

    @model_validator(mode="after")
    def _complete(self) -> Self:
        missing = [meter.value for meter in Meter if meter not in self.prices]
        if missing:
            raise ValueError(f"prices: no {', '.join(missing)}")
        return self


def load_document(model: type[M], source: Path | Traversable, what: str, *, missing: str = "") -> M:
    """``source``'s JSON as ``model``; CostDataError names the file and each bad field, never echoing values.

    ``missing`` is appended when there is no such file: what to run to make one.
    """
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise CostDataError(f"{what} {source}: no such file{missing}") from error
    except (OSError, UnicodeDecodeError) as error:
        raise CostDataError(f"{what} {source}: cannot read it ({error})") from error
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        raise CostDataError(f"{what} {source}: {summarize_validation_error(error)}") from error


def default_prices() -> Traversable:
    """The table shipped with the package (package data: pyproject.toml's [tool.setuptools.package-data])."""
    return files("conveyor.ops") / "prices" / f"{DEFAULT_REGION}.json"


def load_prices(path: Path | Traversable | None = None) -> PriceTable:
    """The price table at ``path`` (default: the packaged one); CostDataError says what is wrong with it."""
    return load_document(PriceTable, path or default_prices(), "price table")
