"""What a benchmark row holds: figures beside their anchors, the issue's targets, and detail tables.

Every figure is a ratio to an anchor measured in the same run, or a count (no anchor). A row
that could not run holds the reason instead of figures.
"""

import math
from dataclasses import dataclass, field
from typing import Any

# The multiplication sign ratios are written with (1.05x, with the sign).
TIMES = "\u00d7"


@dataclass(frozen=True)
class Target:
    """A "must reach" bound of issue 16: on the ratio to the anchor or on the value itself."""

    bound: float
    at_most: bool = True
    on_ratio: bool = True
    # The value's unit, for a bound on the value ("req/s").
    unit: str = ""

    def met(self, value: float, ratio: float | None) -> bool | None:
        """Whether ``value`` (or its ``ratio``) is within the bound; None when there is nothing to compare."""
        measured = ratio if self.on_ratio else value
        if measured is None or math.isnan(measured):
            return None
        return measured <= self.bound if self.at_most else measured >= self.bound

    def __str__(self) -> str:
        sign = "≤" if self.at_most else "≥"
        return f"{sign} {self.bound:g}{TIMES}" if self.on_ratio else f"{sign} {self.bound:g} {self.unit}".rstrip()


@dataclass(frozen=True)
class Figure:
    """One measured value, in ``unit``, and what it is held against."""

    name: str
    value: float
    unit: str
    anchor: float | None = None
    anchor_label: str = ""
    target: Target | None = None

    @property
    def ratio(self) -> float | None:
        """value / anchor; None for a count, NaN for a zero anchor."""
        if self.anchor is None:
            return None
        return self.value / self.anchor if self.anchor else math.nan

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.target.met(self.value, self.ratio)

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "anchor": self.anchor,
            "anchor_label": self.anchor_label,
            "ratio": None if ratio is None or math.isnan(ratio) else ratio,
            "target": None if self.target is None else str(self.target),
            "met": self.met,
        }


@dataclass(frozen=True)
class Table:
    """A detail table: the breakdown behind a row's figures."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "headers": list(self.headers), "rows": [list(row) for row in self.rows]}


@dataclass(frozen=True)
class Row:
    """One benchmark of issue 16: measured (figures) or skipped (the reason)."""

    key: str
    title: str
    figures: tuple[Figure, ...] = ()
    tables: tuple[Table, ...] = ()
    notes: tuple[str, ...] = ()
    skipped: str | None = None
    # Raw measurements for readers of results.json (seconds, counts by operation, ...).
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def skip(cls, key: str, title: str, reason: str) -> "Row":
        return cls(key=key, title=title, skipped=" ".join(reason.split()) or "no reason given")

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "status": "skipped" if self.skipped else "measured",
            "reason": self.skipped,
            "figures": [figure.to_json() for figure in self.figures],
            "tables": [table.to_json() for table in self.tables],
            "notes": list(self.notes),
            "data": self.data,
        }
