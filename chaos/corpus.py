"""A corpus of hostile SQS messages for the worker harness, drawn with hypothesis and kept as chaos/bad_inputs.json.

Each entry is one message a sender could put on a Conveyor queue: its class, its body, the message
attributes it is sent with (SendMessage's ``MessageAttributes``), the queue it goes to, and how the
harness must end it: dead-lettered on its first delivery with ``expected_reason`` and its body
unchanged, or, where ``expected_reason`` is null, run like any good job. The ``refused_by_sqs``
class holds bodies SQS itself refuses at SendMessage (``expected_refusal`` is the error code): they
never reach a worker, and are kept to show that strict mode refuses them too. No other entry holds
a body or an attribute SQS would refuse.

A body longer than ``INLINE_MAX`` characters is stored as ``body_parts``, ``[text, count]`` pairs
joined in order (a 1 MiB body is a few lines), with its ``body_sha256`` to check the expansion:
read the file with ``load()``, which expands and checks them. Outcomes are written for a worker
whose clock reads ``NOW`` (the good envelopes are a minute old then); they hold as well for any
clock from 2021 until a day after ``NOW``, the good envelopes then being from the future.

Reproducible: each class draws its cases from hypothesis strategies with a seed of its own (the
corpus seed and the class name), with the example database off and only the generate phase, so
the same hypothesis release (``HYPOTHESIS_VERSION``) and Python minor version write the same file.
Regenerate with ``python -m chaos.corpus --output chaos/bad_inputs.json``; the harness replays it in
tests/unit/worker/test_bad_inputs.py, which also checks that the committed file is what this writes.

Expected outcomes come from the contract (docs/contracts.md, docs/harness.md), the topology's
declarations and SQS's documented rules, never from running the harness.
"""

import argparse
import hashlib
import json
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import hypothesis
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants

from conveyor.contract import limits
from conveyor.contract import message_attributes as attrs
from conveyor.contract.declarations import JobType
from conveyor.contract.reasons import Reason
from conveyor.contract.schedules import MAX_SHARDS
from functions.jobs.generate_report import MAX_ROWS
from functions.topology import TOPOLOGY

T = TypeVar("T")

HYPOTHESIS_VERSION = "6.170.17"
SEED = 15_002  # issue 15, item 2
FORMAT = 1
DEFAULT_OUTPUT = Path(__file__).with_name("bad_inputs.json")
# The instant the corpus is written for: its envelopes are a minute old then. A replay runs the harness at it.
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
CREATED_AT = "2030-01-01T11:59:00Z"
# Distinct cases drawn per strategy, and how many examples hypothesis may try to find them.
DRAWN = 4
TRIES_PER_CASE = 6
INLINE_MAX = 8 * 1024

# SQS's message body alphabet (XML 1.0's characters); an attribute's string value has the same rule.
_SQS_TEXT = re.compile(f"[{limits.SQS_BODY_CHARACTERS}]*")
# Characters a JSON text may hold between tokens.
JSON_WHITESPACE = " \t\n\r"
# Characters SQS refuses in a body: C0 controls but tab, LF and CR; lone surrogates; U+FFFE and U+FFFF.
REFUSED_CHARACTERS = "\x00\x01\x07\x08\x0b\x0c\x0e\x1b\x1f\ud800\udbff\udc00\udfff\ufffe\uffff"
# Characters SQS accepts that are controls, invisible or direction-changing.
ODD_CHARACTERS = "\t\n\r\x7f\x85\x9b\u00a0\u200b\u2028\u202e\ufeff"
# Python's int() (so json.loads) refuses integers longer than this (sys.int_info.default_max_str_digits).
MAX_INT_DIGITS = 4300
# The job type most classes wrap their hostile part in (the default queue's), and its good payload.
BASE_TYPE = "send_welcome_email"
GOOD_DATA: dict[str, Callable[[str], dict[str, Any]]] = {
    "send_welcome_email": lambda ident: {"user_id": ident, "locale": "en"},
    "charge_order": lambda ident: {"order_id": ident, "amount_cents": 1999, "currency": "EUR"},
    "deliver_webhook": lambda ident: {
        "url": f"https://hooks.example/{ident}",
        "event_id": f"evt-{ident}",
        "body": "{}",
    },
    "generate_report": lambda ident: {"report_id": ident, "rows": 3},
    "summarize_day": lambda ident: {"report": ident},
    "sweep_accounts": lambda ident: {"shard": 0, "shards": 4},
}
# Payloads of the right JSON types that break a model's constraints.
PAYLOAD_CONSTRAINTS: dict[str, list[dict[str, Any]]] = {
    "send_welcome_email": [{"user_id": ""}],
    "charge_order": [{"amount_cents": 0}, {"amount_cents": -1}, {"currency": "eur"}, {"currency": "EURO"}],
    "deliver_webhook": [{"url": "ftp://hooks.example/x"}, {"url": ""}, {"event_id": ""}],
    "generate_report": [{"rows": 0}, {"rows": MAX_ROWS + 1}, {"report_id": ""}],
    "summarize_day": [{"report": ""}],
    "sweep_accounts": [{"shard": MAX_SHARDS}, {"shard": -1}, {"shards": 0}, {"shards": MAX_SHARDS + 1}],
}
CONVEYOR_ATTRIBUTES = (
    attrs.PRIOR_ATTEMPTS,
    attrs.NOT_BEFORE,
    attrs.REDRIVEN_AT,
    attrs.REDRIVE_ID,
    attrs.FIRST_FAILED_AT,
    attrs.REASON,
    attrs.ATTEMPTS,
    attrs.ERROR,
    attrs.JOB_TYPE,
    attrs.JOB_ID,
    attrs.SOURCE_QUEUE,
    attrs.LAST_FAILED_AT,
)

Attributes = dict[str, dict[str, str]]
Parts = tuple[tuple[str, int], ...]


class CorpusError(Exception):
    """The corpus cannot be written or read as it stands."""


@dataclass(frozen=True)
class BadInput:
    """One hostile message and how the harness must end it."""

    cls: str
    name: str
    queue: str
    parts: Parts
    expected_reason: Reason | None
    attributes: Attributes = field(default_factory=dict)
    expected_refusal: str | None = None
    note: str = ""

    @property
    def body(self) -> str:
        return "".join(text * count for text, count in self.parts)

    def to_json(self) -> dict[str, Any]:
        body = self.body
        document: dict[str, Any] = {"class": self.cls, "name": self.name, "queue": self.queue}
        if len(body) <= INLINE_MAX:
            document["body"] = body
        else:
            document["body_parts"] = [[text, count] for text, count in self.parts]
            document["body_sha256"] = _sha256(body)
        if self.attributes:
            document["attributes"] = self.attributes
        document["expected_reason"] = self.expected_reason.value if self.expected_reason else None
        if self.expected_refusal:
            document["expected_refusal"] = self.expected_refusal
        if self.note:
            document["note"] = self.note
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> "BadInput":
        if "body" in document:
            parts: Parts = ((str(document["body"]), 1),)
        else:
            parts = tuple((str(text), int(count)) for text, count in document["body_parts"])
        entry = cls(
            cls=str(document["class"]),
            name=str(document["name"]),
            queue=str(document["queue"]),
            parts=parts,
            expected_reason=Reason(document["expected_reason"]) if document.get("expected_reason") else None,
            attributes=dict(document.get("attributes") or {}),
            expected_refusal=document.get("expected_refusal"),
            note=str(document.get("note", "")),
        )
        if "body_sha256" in document and _sha256(entry.body) != document["body_sha256"]:
            raise CorpusError(f"{entry.name}: body_parts do not expand to the body whose sha256 is recorded")
        return entry


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# --- drawing from strategies, reproducibly -----------------------------------------------------


def _seed(label: str) -> int:
    return SEED * 2**32 + zlib.crc32(label.encode())


def _no_local_constants() -> Constants:
    return Constants()


@contextmanager
def only_the_seed() -> Iterator[None]:
    """While drawing, hypothesis picks no literals out of this project's modules.

    Now and then (p = 0.05) hypothesis draws a constant instead of a random value, from its own
    list and from the string and number literals of every local module imported so far: the
    corpus would then change with any edit anywhere in the project, and with what was imported
    first. This is hypothesis's internal API, pinned with ``HYPOTHESIS_VERSION``.
    """
    with mock.patch.object(providers, "_get_local_constants", _no_local_constants):
        providers.CONSTANTS_CACHE.cache.clear()
        try:
            yield
        finally:
            providers.CONSTANTS_CACHE.cache.clear()


def draw(strategy: st.SearchStrategy[T], count: int, *, label: str) -> list[T]:
    """``count`` distinct examples of ``strategy``, the same ones on every run of the same hypothesis release.

    The seed is the corpus's and ``label``'s; the database is off, only the generate phase runs
    and no constant comes from the project's code (``only_the_seed``), so nothing but the seed
    decides what is drawn. Examples are told apart by their JSON.
    """
    found: list[T] = []
    seen: set[str] = set()

    @hypothesis.seed(_seed(label))
    @hypothesis.settings(
        database=None,
        max_examples=count * TRIES_PER_CASE,
        phases=[hypothesis.Phase.generate],
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        verbosity=hypothesis.Verbosity.quiet,
        print_blob=False,
    )
    @hypothesis.given(strategy)
    def collect(value: T) -> None:
        key = json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)
        if len(found) < count and key not in seen:
            seen.add(key)
            found.append(value)

    with only_the_seed():
        collect()
    if len(found) < count:
        raise CorpusError(f"{label}: hypothesis drew {len(found)} distinct cases, not {count}")
    return found


def sqs_accepts(text: str) -> bool:
    """Whether SQS takes ``text`` as a body or a string attribute value (non-empty, XML characters only)."""
    return bool(text) and _SQS_TEXT.fullmatch(text) is not None


SQS_CHARACTERS = st.characters(min_codepoint=0x20, exclude_categories=["Cs"], exclude_characters="\ufffe\uffff")
REFUSED = st.sampled_from(REFUSED_CHARACTERS)
NON_STRING: st.SearchStrategy[Any] = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=2),
    st.dictionaries(st.text(SQS_CHARACTERS, max_size=3), st.integers(0, 9), max_size=2),
)
NOT_INTEGER: st.SearchStrategy[Any] = st.one_of(
    st.text(SQS_CHARACTERS, max_size=5),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=2),
    st.dictionaries(st.text(SQS_CHARACTERS, max_size=3), st.integers(0, 9), max_size=2),
)
NOT_OBJECT: st.SearchStrategy[Any] = st.one_of(
    st.integers(-(10**12), 10**12),
    st.text(SQS_CHARACTERS, max_size=5),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=2),
)
JSON_SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(SQS_CHARACTERS, max_size=8),
)
JSON_NON_OBJECTS: st.SearchStrategy[Any] = st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=4))


# --- envelopes ---------------------------------------------------------------------------------


def job_type(name: str) -> JobType[Any]:
    return TOPOLOGY.job_type(name)


def document(name: str, ident: str, **fields: Any) -> dict[str, Any]:
    """A good envelope of job type ``name`` with id ``ident``, then ``fields`` set over it."""
    result: dict[str, Any] = {
        "type": name,
        "v": job_type(name).version,
        "id": ident,
        "created_at": CREATED_AT,
        "correlation": {"request_id": f"req-{ident}"},
        "data": GOOD_DATA[name](ident),
    }
    result.update(fields)
    return result


def without(source: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {key: value for key, value in source.items() if key not in names}


def dumps(value: Any, *, ascii_only: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


def strict_json(text: str) -> bool:
    """Whether ``text`` is JSON as RFC 8259 has it (so without NaN or Infinity), and shallow enough to read."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    try:
        json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return True


def utc_instant(local: datetime, offset_minutes: int) -> datetime | None:
    """``local`` at ``offset_minutes`` east of UTC, in UTC; None if that instant is outside years 1 to 9999."""
    try:
        return (local - timedelta(minutes=offset_minutes)).replace(tzinfo=UTC)
    except OverflowError:
        return None


def rfc3339(local: datetime, offset_minutes: int) -> str:
    sign = "-" if offset_minutes < 0 else "+"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{local.year:04d}-{local:%m-%dT%H:%M:%S}{sign}{hours:02d}:{minutes:02d}"  # %Y drops a year's zeros


def created_at_outcome(created_at: datetime | None, name: str = BASE_TYPE) -> Reason | None:
    """What the harness must do with a job enqueued at ``created_at`` (None: not an instant) when it runs at NOW."""
    if created_at is None:
        return Reason.INVALID_ENVELOPE
    if NOW - created_at > job_type(name).retry.max_wall_time:
        return Reason.DEADLINE_EXCEEDED
    return None  # a created_at in the future is accepted: its age is negative (docs/schedules.md)


# --- the classes ---------------------------------------------------------------------------------


class ClassBuilder:
    """Collects the entries of one class; each is named ``<class>-<nn>`` and its envelope id is ``chaos-<name>``."""

    def __init__(self, cls: str) -> None:
        self.cls = cls
        self.entries: list[BadInput] = []

    @property
    def ident(self) -> str:
        """The job id of the entry about to be added."""
        return f"chaos-{self.cls}-{len(self.entries):02d}"

    def add(
        self,
        body: str | Parts,
        expected: Reason | None,
        *,
        queue: str = "default",
        attributes: Attributes | None = None,
        refusal: str | None = None,
        note: str = "",
    ) -> None:
        parts: Parts = ((body, 1),) if isinstance(body, str) else body
        if any(entry.queue == queue and entry.parts == parts for entry in self.entries):
            return  # a pinned case hypothesis also drew
        entry = BadInput(
            cls=self.cls,
            name=f"{self.cls}-{len(self.entries):02d}",
            queue=queue,
            parts=parts,
            expected_reason=expected,
            attributes=attributes or {},
            expected_refusal=refusal,
            note=note,
        )
        self.entries.append(entry)

    def draw(self, strategy: st.SearchStrategy[T], count: int = DRAWN, *, label: str = "") -> list[T]:
        return draw(strategy, count, label=f"{self.cls}/{label}")


def malformed_json() -> list[BadInput]:
    b = ClassBuilder("malformed_json")
    base = dumps(document(BASE_TYPE, "chaos-malformed_json"))

    def mutate(case: tuple[str, int, str]) -> str:
        kind, where, char = case
        at = where % len(base)
        if kind == "truncate":
            return base[: max(1, at)]
        if kind == "drop":
            return base[:at] + base[at + 1 :]
        if kind == "insert":
            return base[:at] + char + base[at:]
        return base.replace('"', "'")

    mutations = st.tuples(
        st.sampled_from(("truncate", "drop", "insert", "single_quotes")),
        st.integers(0, 10_000),
        st.sampled_from(list("{}[],:\"'\\")),
    ).map(mutate)
    for body in b.draw(mutations.filter(lambda text: sqs_accepts(text) and not strict_json(text))):
        b.add(body, Reason.INVALID_JSON, note="a good envelope, mangled")
    for body in (
        '{"type": "send_welcome_email",}',
        "{type: 1}",
        '{"a": 1} // a comment',
        "undefined",
    ):
        b.add(body, Reason.INVALID_JSON)
    # Python's json reads these; they are not JSON (RFC 8259 has no NaN or Infinity).
    for body in (
        "NaN",
        "-Infinity",
        base.replace('"v": 2', '"v": NaN'),
        base.replace('"locale": "en"', '"n": Infinity'),
    ):
        b.add(body, Reason.INVALID_JSON, note="NaN and Infinity are not JSON")
    return b.entries


def non_object_json() -> list[BadInput]:
    b = ClassBuilder("non_object_json")
    for value in b.draw(JSON_NON_OBJECTS):
        b.add(dumps(value), Reason.INVALID_ENVELOPE)
    good = document(BASE_TYPE, b.ident)
    for body in ("[]", '"send_welcome_email"', "0", "null", "true", "false", dumps([good]), dumps(dumps(good))):
        b.add(body, Reason.INVALID_ENVELOPE, note="valid JSON, not an object")
    return b.entries


REQUIRED_FIELDS = ("type", "v", "id", "created_at", "data")


def missing_envelope_fields() -> list[BadInput]:
    b = ClassBuilder("missing_envelope_fields")
    drops = st.lists(st.sampled_from(REQUIRED_FIELDS), unique=True, min_size=1).map(sorted)
    for names in b.draw(drops):
        b.add(dumps(without(document(BASE_TYPE, b.ident), *names)), Reason.INVALID_ENVELOPE, note=f"no {names}")
    b.add("{}", Reason.INVALID_ENVELOPE)
    b.add(dumps({"correlation": {"request_id": "r"}}), Reason.INVALID_ENVELOPE)
    return b.entries


WRONG_ENVELOPE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "type": NON_STRING | st.just(""),
    "v": NOT_INTEGER,
    "id": NON_STRING | st.just(""),
    # RFC 3339 text only: a number is not a time stamp (docs/contracts.md).
    "created_at": NON_STRING,
    "data": NOT_OBJECT,
    "correlation": NOT_OBJECT,
    "dedupe_key": NON_STRING.filter(lambda value: value is not None) | st.just(""),
    "correlation.request_id": NON_STRING.filter(lambda value: value is not None),
}


def wrong_envelope_field_types() -> list[BadInput]:
    b = ClassBuilder("wrong_envelope_field_types")
    cases = st.sampled_from(sorted(WRONG_ENVELOPE_VALUES)).flatmap(
        lambda name: st.tuples(st.just(name), WRONG_ENVELOPE_VALUES[name])
    )
    for name, value in b.draw(cases, 8):
        envelope = document(BASE_TYPE, b.ident)
        if name == "correlation.request_id":
            envelope["correlation"] = {"request_id": value}
        else:
            envelope[name] = value
        b.add(dumps(envelope), Reason.INVALID_ENVELOPE, note=f"{name} = {value!r}")
    for created_at in (1893499140, 0, 1.5):
        b.add(dumps(document(BASE_TYPE, b.ident, created_at=created_at)), Reason.INVALID_ENVELOPE, note="a number")
    return b.entries


def unknown_job_type() -> list[BadInput]:
    b = ClassBuilder("unknown_job_type")
    declared = {declared_type.name for declared_type in TOPOLOGY.job_types}
    names = st.text(SQS_CHARACTERS, min_size=1, max_size=30).filter(lambda name: name not in declared)
    for name in b.draw(names):
        b.add(dumps(document(BASE_TYPE, b.ident, type=name)), Reason.UNKNOWN_TYPE)
    for name, note in (
        ("charge_order", "declared, but routed to the critical queue"),
        ("Send_Welcome_Email", "case"),
        ("send_welcome_email ", "a trailing space"),
        ("send-welcome-email", "hyphens"),
        ("send_welcome_email\u200b", "a zero-width space"),
    ):
        b.add(dumps(document(BASE_TYPE, b.ident, type=name)), Reason.UNKNOWN_TYPE, note=note)
    return b.entries


def unsupported_version() -> list[BadInput]:
    b = ClassBuilder("unsupported_version")
    welcome = job_type(BASE_TYPE)

    def outcome(version: Any) -> Reason:
        # The envelope's v is an integer >= 1 (docs/contracts.md); a declared type then takes its supported range.
        if type(version) is not int or version < 1:
            return Reason.INVALID_ENVELOPE
        return Reason.UNSUPPORTED_VERSION

    versions = st.one_of(st.integers(max_value=0), st.integers(min_value=welcome.version + 1))
    for version in b.draw(versions):
        b.add(dumps(document(BASE_TYPE, b.ident, v=version)), outcome(version), note=f"v = {version}")
    pinned: list[Any] = [0, -1, 2**63, -(2**63), 10**30, True, False, "2", 2.0, welcome.version + 1]
    for version in pinned:
        b.add(dumps(document(BASE_TYPE, b.ident, v=version)), outcome(version), note=f"v = {version!r}")
    charge = job_type("charge_order")
    for version in (charge.version + 1, 10**6):
        b.add(
            dumps(document(charge.name, b.ident, v=version)),
            outcome(version),
            queue=charge.queue,
            note=f"{charge.name} v{version}",
        )
    return b.entries


def _wrong_for(annotation: Any) -> st.SearchStrategy[Any]:
    return NOT_INTEGER if annotation is int else NON_STRING


def invalid_payload(name: str) -> list[BadInput]:
    declared = job_type(name)
    b = ClassBuilder(f"invalid_payload_{name}")
    fields = declared.model.model_fields
    required = sorted(field_name for field_name, info in fields.items() if info.is_required())
    missing = st.lists(st.sampled_from(required), unique=True, min_size=1).map(lambda names: ("missing", sorted(names)))
    wrong = st.sampled_from(sorted(fields)).flatmap(
        lambda field_name: st.tuples(
            st.just("wrong"), st.tuples(st.just(field_name), _wrong_for(fields[field_name].annotation))
        )
    )
    extra = (
        st.text(SQS_CHARACTERS, min_size=1, max_size=10)
        .filter(lambda key: key not in fields)
        .map(lambda key: ("extra", key))
    )
    for kind, detail in b.draw(st.one_of(missing, wrong, extra), 6):
        data = GOOD_DATA[name](b.ident)
        if kind == "missing":
            data = without(data, *detail)
        elif kind == "wrong":
            field_name, value = detail
            data[field_name] = value
        else:
            data[detail] = 1
        b.add(
            dumps(document(name, b.ident, data=data)),
            Reason.INVALID_PAYLOAD,
            queue=declared.queue,
            note=f"{kind}: {detail!r}",
        )
    for change in PAYLOAD_CONSTRAINTS[name]:
        data = GOOD_DATA[name](b.ident) | change
        b.add(dumps(document(name, b.ident, data=data)), Reason.INVALID_PAYLOAD, queue=declared.queue, note=f"{change}")
    if name == BASE_TYPE:  # v1 was {"user": ...}: its upcaster meets a v1 body without it, or of the wrong type
        for data in ({}, {"user": 5}, {"user_id": b.ident}):
            b.add(dumps(document(name, b.ident, v=1, data=data)), Reason.INVALID_PAYLOAD, note=f"v1 {data}")
    return b.entries


PAD_CHARACTERS = ("x", "é", "€", "😀")
PAD_MARK = "@@pad@@"


def sized_body(name: str, ident: str, field_name: str, size: int, pad: str) -> Parts:
    """An envelope of ``name`` whose UTF-8 body is exactly ``size`` bytes, ``field_name`` padded with ``pad``."""
    data = GOOD_DATA[name](ident) | {field_name: PAD_MARK}
    head, tail = dumps(document(name, ident, data=data)).split(PAD_MARK)
    room = size - len((head + tail).encode())
    width = len(pad.encode())
    count, rest = divmod(room, width)
    if count < 1:
        raise CorpusError(f"{name}: no room for a {size}-byte body")
    return ((head, 1), (pad, count), ("x" * rest + tail, 1))


def payload_size() -> list[BadInput]:
    b = ClassBuilder("payload_size")
    targets = (("deliver_webhook", "body"), ("summarize_day", "report"))
    cases = st.tuples(st.sampled_from(targets), st.sampled_from((-1, 0, 1, 4096)), st.sampled_from(PAD_CHARACTERS))
    pinned = [(target, offset, "x") for target in targets for offset in (0, 1)]
    for (name, field_name), offset, pad in pinned + b.draw(cases, 3):
        declared = job_type(name)
        size = declared.max_payload_bytes + offset
        parts = sized_body(name, b.ident, field_name, size, pad)
        expected = Reason.PAYLOAD_TOO_LARGE if offset > 0 else None
        b.add(
            parts, expected, queue=declared.queue, note=f"{size} bytes: max_payload_bytes {offset:+d}, {pad!r} padding"
        )
    return b.entries


def oversized_bodies() -> list[BadInput]:
    """Bodies past every job type's max_payload_bytes that fail before admission: their dead letter must still fit."""
    b = ClassBuilder("oversized_bodies")
    most = limits.SQS_MAX_MESSAGE_BYTES
    for room, pad in b.draw(st.tuples(st.sampled_from((256, 1024, 4096)), st.sampled_from(PAD_CHARACTERS)), 3):
        count, rest = divmod(most - room - 1, len(pad.encode()))
        b.add(
            (("{", 1), (pad, count), ("x" * rest, 1)),
            Reason.INVALID_JSON,
            note=f"not JSON, {room} bytes under SQS's maximum",
        )
    string_room = most - 2048
    b.add((('"', 1), ("x", string_room), ('"', 1)), Reason.INVALID_ENVELOPE, note="a JSON string of about 1 MiB")
    head, tail = dumps(document(BASE_TYPE, b.ident, type=PAD_MARK)).split(PAD_MARK)
    b.add(((head, 1), ("t", 600_000), (tail, 1)), Reason.UNKNOWN_TYPE, note="a type 600,000 characters long")
    head, tail = dumps(without(document("summarize_day", b.ident, data={"report": PAD_MARK}), "created_at")).split(
        PAD_MARK
    )
    b.add(((head, 1), ("r", 900_000), (tail, 1)), Reason.INVALID_ENVELOPE, note="no created_at, 900 KB of data")
    return b.entries


def refused_by_sqs() -> list[BadInput]:
    b = ClassBuilder("refused_by_sqs")
    base = dumps(document(BASE_TYPE, "chaos-refused_by_sqs"))
    inserts = st.tuples(st.integers(0, len(base)), REFUSED).map(
        lambda case: base[: case[0]] + case[1] + base[case[0] :]
    )
    for body in b.draw(inserts, 6):
        b.add(body, None, refusal="InvalidMessageContents", note="a character outside SQS's body alphabet")
    b.add("\x00", None, refusal="InvalidMessageContents")
    b.add("", None, refusal="MissingParameter", note="an empty body")
    return b.entries


IDENTIFIER_FIELDS = ("type", "id", "dedupe_key")


def unrepresentable_characters() -> list[BadInput]:
    """Characters SQS refuses, written as JSON escapes in an otherwise acceptable body, in every kind of place."""
    b = ClassBuilder("unrepresentable_characters")
    places = ("type", "id", "dedupe_key", "correlation.request_id", "data key", "data value")
    cases = st.tuples(st.sampled_from(places), REFUSED, st.integers(0, 8))
    for place, char, at in b.draw(cases, 8):
        envelope = document("summarize_day", b.ident)
        expected: Reason | None
        surrogate = "\ud800" <= char <= "\udfff"
        if place in IDENTIFIER_FIELDS:
            text = str(envelope.get(place) or "key")
            envelope[place] = text[:at] + char + text[at:]
            # The job's identifiers go into attributes and logs, so they hold only what SQS can carry.
            expected = Reason.INVALID_ENVELOPE
        elif place == "correlation.request_id":
            envelope["correlation"] = {"request_id": f"req{char}"}
            expected = Reason.INVALID_ENVELOPE if surrogate else None  # only logged; a lone surrogate is no text
        elif place == "data key":
            envelope["data"] = envelope["data"] | {f"k{char}": 1}
            expected = Reason.INVALID_PAYLOAD
        else:
            report = str(envelope["data"]["report"])
            envelope["data"] = {"report": report[:at] + char + report[at:]}
            expected = Reason.INVALID_PAYLOAD if surrogate else None
        b.add(dumps(envelope, ascii_only=True), expected, note=f"{char!r} in the {place}")
    return b.entries


def control_characters() -> list[BadInput]:
    """Raw characters SQS accepts that are controls or invisible: JSON takes some between tokens, some in strings."""
    b = ClassBuilder("control_characters")
    cases = st.tuples(st.sampled_from(("between tokens", "in a string", "in the id")), st.sampled_from(ODD_CHARACTERS))
    for place, char in b.draw(cases, 8):
        if place == "in the id":
            ident = b.ident
            body = dumps(document(BASE_TYPE, ident)).replace(f'"id": "{ident}"', f'"id": "{ident}{char}"')
            # A raw control character inside a JSON string is not JSON; anything else SQS carries is a fine id.
            expected = Reason.INVALID_JSON if char < " " else None
        elif place == "in a string":
            ident = b.ident
            body = dumps(document("summarize_day", ident)).replace(f'"report": "{ident}"', f'"report": "{ident}{char}"')
            expected = Reason.INVALID_JSON if char < " " else None
        else:
            body = dumps(document(BASE_TYPE, b.ident)).replace(", ", "," + char, 1)
            expected = None if char in JSON_WHITESPACE else Reason.INVALID_JSON
        b.add(body, expected, note=f"{char!r} {place}, raw")
    return b.entries


def deep_nesting() -> list[BadInput]:
    """Nesting past what the parser reads on any stack (Python's recursion limit is 1,000), and nesting it reads."""
    b = ClassBuilder("deep_nesting")
    deep = st.tuples(st.integers(1_000, 12_000), st.sampled_from(("bare", "data", "ignored field")), st.booleans())
    for depth, where, objects in b.draw(deep, 5):
        opening, closing = ('{"k": ', "}") if objects else ("[", "]")
        nested: Parts = ((opening, depth), ("1", 1), (closing, depth))
        if where == "bare":
            b.add(nested, Reason.INVALID_JSON, note=f"{depth} deep")
            continue
        envelope = document(BASE_TYPE, b.ident, **({"data": PAD_MARK} if where == "data" else {"meta": PAD_MARK}))
        head, tail = dumps(envelope).split(f'"{PAD_MARK}"')
        b.add(((head, 1), *nested, (tail, 1)), Reason.INVALID_JSON, note=f"{depth} deep in the {where}")
    b.add((("[", 10_000), ("]", 10_000)), Reason.INVALID_JSON, note="10,000 deep")
    for depth in b.draw(st.integers(1, 200), 2, label="shallow"):
        head, tail = dumps(document(BASE_TYPE, b.ident, meta=PAD_MARK)).split(f'"{PAD_MARK}"')
        b.add(((head, 1), ("[", depth), ("]", depth), (tail, 1)), None, note=f"{depth} deep in an ignored field")
    head, tail = dumps(document("summarize_day", b.ident, data={"report": PAD_MARK})).split(f'"{PAD_MARK}"')
    b.add(
        ((head, 1), ("[", 300), ("]", 300), (tail, 1)), Reason.INVALID_PAYLOAD, note="300 deep where a string belongs"
    )
    return b.entries


def huge_numbers() -> list[BadInput]:
    b = ClassBuilder("huge_numbers")
    charge = job_type("charge_order")
    for digits in b.draw(st.integers(20, 6_000), 5):
        amount = "9" * digits
        head, tail = dumps(
            document(charge.name, b.ident, data=GOOD_DATA[charge.name](b.ident) | {"amount_cents": 0})
        ).split('"amount_cents": 0')
        body = f'{head}"amount_cents": {amount}{tail}'
        # A positive integer is a fine amount_cents; one longer than Python's int() reads is not JSON it can read.
        expected = Reason.INVALID_JSON if digits > MAX_INT_DIGITS else None
        b.add(body, expected, queue=charge.queue, note=f"amount_cents of {digits} digits")
    for digits in (MAX_INT_DIGITS, MAX_INT_DIGITS + 1, 5_001):
        body = dumps(document(charge.name, b.ident)).replace(
            '"amount_cents": 1999', '"amount_cents": 1' + "0" * (digits - 1)
        )
        expected = Reason.INVALID_JSON if digits > MAX_INT_DIGITS else None
        b.add(body, expected, queue=charge.queue, note=f"amount_cents of {digits} digits")
    base = dumps(document(BASE_TYPE, b.ident))
    b.add(base.replace('"v": 2', '"v": 1e400'), Reason.INVALID_ENVELOPE, note="v = 1e400 (a float, infinite)")
    b.add(base.replace('"v": 2', '"v": ' + "1" + "0" * 5000), Reason.INVALID_JSON, note="v = 10**5000")
    b.add(base.replace('"v": 2', '"v": 2.0e0'), Reason.INVALID_ENVELOPE, note="v = 2.0e0")
    charge_base = dumps(document(charge.name, b.ident))
    for number in ("1e400", "-1e400", "1e-400", "1999.0"):
        b.add(
            charge_base.replace('"amount_cents": 1999', f'"amount_cents": {number}'),
            Reason.INVALID_PAYLOAD,
            queue=charge.queue,
            note=f"amount_cents = {number}",
        )
    sweep = dumps(document("sweep_accounts", b.ident))
    b.add(sweep.replace('"shard": 0', '"shard": 1e400'), Reason.INVALID_PAYLOAD, note="shard = 1e400")
    return b.entries


def very_long_ids() -> list[BadInput]:
    b = ClassBuilder("very_long_ids")
    cases = st.tuples(
        st.sampled_from(("id", "type", "dedupe_key", "request_id")), st.integers(129, 20_000), SQS_CHARACTERS
    )
    for place, length, char in b.draw(cases, 6):
        value = char * length
        expected: Reason | None
        if place == "id":
            expected = Reason.INVALID_ENVELOPE  # at most 128 characters (docs/contracts.md)
            envelope = document(BASE_TYPE, b.ident, id=value)
        elif place == "type":
            expected = Reason.UNKNOWN_TYPE
            envelope = document(BASE_TYPE, b.ident, type=value)
        elif place == "dedupe_key":
            expected = None  # no limit: only its hash is stored
            envelope = document(BASE_TYPE, b.ident, dedupe_key=value)
        else:
            expected = None
            envelope = document(BASE_TYPE, b.ident, correlation={"request_id": value})
        b.add(dumps(envelope), expected, note=f"{place} of {length} x {char!r}")
    b.add(dumps(document(BASE_TYPE, b.ident, dedupe_key="d" * 50_000)), None, note="a dedupe_key of 50,000 characters")
    b.add(dumps(document(BASE_TYPE, b.ident, id="i" * 128)), None, note="an id of exactly 128 characters")
    b.add(dumps(document(BASE_TYPE, b.ident, id="😀" * 128)), None, note="an id of 128 four-byte characters")
    return b.entries


def trailing_garbage() -> list[BadInput]:
    b = ClassBuilder("trailing_garbage")
    suffixes = st.text(SQS_CHARACTERS, min_size=1, max_size=12).filter(lambda text: text.strip(JSON_WHITESPACE) != "")
    for suffix in b.draw(suffixes):
        b.add(dumps(document(BASE_TYPE, b.ident)) + suffix, Reason.INVALID_JSON, note=f"followed by {suffix!r}")
    for suffix in (" {}", "}", "\u00a0", ",", "null", '\n{"type": "send_welcome_email"}'):
        b.add(dumps(document(BASE_TYPE, b.ident)) + suffix, Reason.INVALID_JSON, note=f"followed by {suffix!r}")
    b.add(" \n\t" + dumps(document(BASE_TYPE, b.ident)) + "\r\n ", None, note="JSON whitespace around it is fine")
    return b.entries


BOM = "\ufeff"


def byte_order_mark() -> list[BadInput]:
    b = ClassBuilder("byte_order_mark")
    places = st.sampled_from(
        ("before", "after", "twice before", "in the type", "in a payload string", "between tokens")
    )
    for place in b.draw(places, 6):
        if place == "in the type":
            body, expected = dumps(document(BASE_TYPE, b.ident, type=BOM + BASE_TYPE)), Reason.UNKNOWN_TYPE
        elif place == "in a payload string":
            body, expected = dumps(document("summarize_day", b.ident, data={"report": BOM + b.ident})), None
        else:
            text = dumps(document(BASE_TYPE, b.ident))
            body = {
                "before": BOM + text,
                "after": text + BOM,
                "twice before": BOM + BOM + text,
                "between tokens": text.replace(", ", "," + BOM, 1),
            }[place]
            expected = Reason.INVALID_JSON  # RFC 8259: a JSON text carries no BOM; Conveyor's parser takes none
        b.add(body, expected, note=f"a BOM {place}")
    return b.entries


def string_attribute(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def number_attribute(value: str) -> dict[str, str]:
    return {"DataType": "Number", "StringValue": value}


def parses_as_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        return False
    return True


def hostile_attributes() -> list[BadInput]:
    """Conveyor's own attribute names, forged by a sender; the harness reads some of them back.

    What the harness does with each (conveyor.worker.delivery): a value it cannot read is ignored; a
    prior_attempts it could not have written (not a plain count, or not below the job's max_attempts)
    is ignored; a redriven_at counts from no later than SQS's SentTimestamp; a not_before that lies
    past the job's max_wall_time (from created_at, or from now for a created_at in the future) can
    never be honoured, so the job is dead-lettered at once as deadline_exceeded, not re-sent until then.
    """
    b = ClassBuilder("hostile_attributes")
    max_wall_time = job_type(BASE_TYPE).retry.max_wall_time
    past_deadline = datetime.fromisoformat(CREATED_AT) + max_wall_time + timedelta(seconds=1)
    pinned: list[tuple[Attributes, Reason | None, str]] = [
        ({attrs.PRIOR_ATTEMPTS: string_attribute("-5")}, None, "prior_attempts -5"),
        ({attrs.PRIOR_ATTEMPTS: number_attribute("-5")}, None, "prior_attempts -5 as a Number"),
        ({attrs.PRIOR_ATTEMPTS: string_attribute("abc")}, None, "prior_attempts abc"),
        ({attrs.PRIOR_ATTEMPTS: number_attribute("1000000000")}, None, "prior_attempts 10**9"),
        ({attrs.PRIOR_ATTEMPTS: number_attribute("1e3")}, None, "prior_attempts 1e3"),
        ({attrs.PRIOR_ATTEMPTS: string_attribute("9" * 60)}, None, "prior_attempts of 60 digits"),
        ({attrs.PRIOR_ATTEMPTS: string_attribute("²")}, None, "prior_attempts in a digit int() refuses"),
        ({attrs.PRIOR_ATTEMPTS: string_attribute("٣")}, None, "prior_attempts in Arabic-Indic digits"),
        ({attrs.PRIOR_ATTEMPTS: number_attribute("3.5")}, None, "prior_attempts 3.5"),
        ({attrs.NOT_BEFORE: string_attribute("9999-12-31T23:59:59Z")}, Reason.DEADLINE_EXCEEDED, "not_before in 9999"),
        (
            {attrs.NOT_BEFORE: string_attribute(past_deadline.isoformat())},
            Reason.DEADLINE_EXCEEDED,
            "not_before a second past the job's max_wall_time",
        ),
        ({attrs.NOT_BEFORE: string_attribute("garbage")}, None, "not_before garbage"),
        ({attrs.NOT_BEFORE: string_attribute("0001-01-01T00:00:00Z")}, None, "not_before in year 1"),
        ({attrs.NOT_BEFORE: string_attribute("9999-12-31T23:59:59-14:00")}, None, "not_before past year 9999 in UTC"),
        ({attrs.NOT_BEFORE: number_attribute("253402300799")}, None, "not_before as epoch seconds"),
        ({attrs.REDRIVEN_AT: string_attribute("9999-12-31T23:59:59Z")}, None, "redriven_at in 9999"),
        ({attrs.REDRIVEN_AT: string_attribute("0001-01-01T00:00:00+14:00")}, None, "redriven_at before year 1 in UTC"),
        ({attrs.REDRIVEN_AT: string_attribute("garbage")}, None, "redriven_at garbage"),
        ({attrs.FIRST_FAILED_AT: string_attribute("9999-12-31T23:59:59-14:00")}, None, "first_failed_at out of range"),
        ({attrs.REDRIVE_ID: string_attribute("r" * 10_000)}, None, "a redrive_id of 10,000 characters"),
        (
            {attrs.REASON: string_attribute("invalid_json"), attrs.PRIOR_ATTEMPTS: string_attribute("4")},
            None,
            "looks moved back from a DLQ",
        ),
        (
            {name: string_attribute("garbage") for name in CONVEYOR_ATTRIBUTES[: limits.SQS_MAX_MESSAGE_ATTRIBUTES]},
            None,
            "ten conveyor.* attributes, all garbage",
        ),
    ]
    for attributes, expected, note in pinned:
        b.add(dumps(document(BASE_TYPE, b.ident)), expected, attributes=attributes, note=note)
    garbage = st.tuples(
        st.sampled_from(CONVEYOR_ATTRIBUTES),
        st.one_of(
            st.text(SQS_CHARACTERS, min_size=1, max_size=40)
            .filter(lambda text: not parses_as_time(text))
            .map(string_attribute),
            st.integers(-(10**30), 10**30)
            .filter(lambda number: not parses_as_time(str(number)))
            .map(lambda number: number_attribute(str(number))),
        ),
    )
    for name, value in b.draw(garbage):
        b.add(
            dumps(document(BASE_TYPE, b.ident)),
            None,
            attributes={name: value},
            note=f"{name} = {value['StringValue']!r}",
        )
    # Bad bodies with forged attributes: the body's reason, and a dead letter SQS takes.
    bad: list[tuple[str, Attributes, Reason, str]] = [
        (
            "{not json",
            {attrs.PRIOR_ATTEMPTS: number_attribute("1" + "0" * 59)},
            Reason.INVALID_JSON,
            "60-digit prior_attempts",
        ),
        (
            dumps(document(BASE_TYPE, b.ident, type="no_such_job")),
            {attrs.PRIOR_ATTEMPTS: string_attribute("²")},
            Reason.UNKNOWN_TYPE,
            "prior_attempts int() refuses",
        ),
        (
            "[1, 2",
            {attrs.NOT_BEFORE: string_attribute("9999-12-31T23:59:59Z")},
            Reason.INVALID_JSON,
            "not_before in 9999",
        ),
        (
            dumps(document(BASE_TYPE, b.ident, data={})),
            {attrs.FIRST_FAILED_AT: string_attribute("9999-12-31T23:59:59-14:00")},
            Reason.INVALID_PAYLOAD,
            "first_failed_at out of range",
        ),
        (
            "{redrive",
            {attrs.REDRIVE_ID: string_attribute("r" * 10_000)},
            Reason.INVALID_JSON,
            "10,000-character redrive_id",
        ),
    ]
    for body, attributes, expected, note in bad:
        b.add(body, expected, attributes=attributes, note=note)
    return b.entries


def nonsense_created_at() -> list[BadInput]:
    b = ClassBuilder("nonsense_created_at")
    offsets = st.integers(-(23 * 60 + 59), 23 * 60 + 59)
    # Not this century: the outcome is then the same at NOW and at any wall clock a replay may run at.
    anywhen = st.tuples(st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)), offsets).filter(
        lambda case: not 2000 <= case[0].year <= 2100
    )
    last_day = st.tuples(
        st.datetimes(datetime(9999, 12, 31), datetime(9999, 12, 31, 23, 59, 59)), st.integers(-(23 * 60 + 59), -1)
    )
    first_day = st.tuples(st.datetimes(datetime(1, 1, 1), datetime(1, 1, 1, 23, 59, 59)), st.integers(1, 23 * 60 + 59))
    for label, strategy in (("anywhen", anywhen), ("last day", last_day), ("first day", first_day)):
        for local, offset in b.draw(strategy, 3, label=label):
            text = rfc3339(local, offset)
            b.add(
                dumps(document(BASE_TYPE, b.ident, created_at=text)),
                created_at_outcome(utc_instant(local, offset)),
                note=f"created_at {text}",
            )
    pinned: list[tuple[Any, Reason | None]] = [
        ("0000-01-01T00:00:00Z", Reason.INVALID_ENVELOPE),
        ("9999-12-31T23:59:59Z", None),
        ("9999-12-31T23:59:59-14:00", Reason.INVALID_ENVELOPE),
        ("0001-01-01T00:00:00+14:00", Reason.INVALID_ENVELOPE),
        ("0001-01-01T00:00:00Z", Reason.DEADLINE_EXCEEDED),
        ("2030-01-01T11:59:00", Reason.INVALID_ENVELOPE),
        ("2030-01-01", Reason.INVALID_ENVELOPE),
        ("garbage", Reason.INVALID_ENVELOPE),
        ("", Reason.INVALID_ENVELOPE),
        ("2030-02-30T00:00:00Z", Reason.INVALID_ENVELOPE),
        ("2030-01-01T11:59:60Z", Reason.INVALID_ENVELOPE),
        ("2030-01-01T11:59:00+25:00", Reason.INVALID_ENVELOPE),
        ("1893499140", Reason.INVALID_ENVELOPE),
        ("2030-01-01t11:59:00z", None),
        ("2030-01-01 11:59:00Z", None),
        ("2030-01-01T11:59:00.123456789Z", None),
    ]
    for created_at, expected in pinned:
        b.add(dumps(document(BASE_TYPE, b.ident, created_at=created_at)), expected, note=f"created_at {created_at!r}")
    return b.entries


def forged_occurrence_ids() -> list[BadInput]:
    """Job ids that read like a schedule's occurrence (``schedule:<name>@<time>``) but name no instant."""
    b = ClassBuilder("forged_occurrence_ids")
    fields = st.tuples(
        st.integers(0, 9999),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 99),
    )

    def impossible(parts: tuple[int, int, int, int, int, int]) -> bool:
        try:
            datetime(*parts)  # only asks whether the fields name a date and time
        except ValueError:
            return True
        return False

    for year, month, day, hour, minute, second in b.draw(fields.filter(impossible), 4):
        ident = f"schedule:nightly-report@{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
        b.add(dumps(document("summarize_day", ident)), None, note="runs as a plain job")
    b.add(
        dumps(document("summarize_day", "schedule:nightly-report@2030-13-45T02:00:00Z", data={"report": ""})),
        Reason.INVALID_PAYLOAD,
        note="an impossible occurrence with a bad payload: dead-lettered once",
    )
    b.add(
        dumps(document("sweep_accounts", "schedule:sweep-accounts@2030-02-30T00:00:00Z#1")), None, note="a shard's id"
    )
    return b.entries


CLASSES: tuple[Callable[[], list[BadInput]], ...] = (
    malformed_json,
    non_object_json,
    missing_envelope_fields,
    wrong_envelope_field_types,
    unknown_job_type,
    unsupported_version,
    *(partial(invalid_payload, declared.name) for declared in TOPOLOGY.job_types),
    payload_size,
    oversized_bodies,
    refused_by_sqs,
    unrepresentable_characters,
    control_characters,
    deep_nesting,
    huge_numbers,
    very_long_ids,
    trailing_garbage,
    byte_order_mark,
    hostile_attributes,
    nonsense_created_at,
    forged_occurrence_ids,
)


# --- the file ----------------------------------------------------------------------------------


def check(entries: Sequence[BadInput]) -> None:
    """What every corpus must hold to: unique names and bodies, and nothing SQS refuses outside refused_by_sqs."""
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        raise CorpusError("entry names repeat")
    bodies = [(entry.queue, entry.body) for entry in entries if entry.expected_refusal is None]
    if len(set(bodies)) != len(bodies):
        raise CorpusError("two entries send the same body to the same queue")
    for entry in entries:
        if entry.expected_refusal is not None:
            if entry.expected_reason is not None:
                raise CorpusError(f"{entry.name}: a body SQS refuses never reaches a worker, so it has no reason")
            continue
        body = entry.body
        if not sqs_accepts(body):
            raise CorpusError(f"{entry.name}: SQS would refuse its body; put it in refused_by_sqs")
        for name, value in entry.attributes.items():
            if not sqs_accepts(value.get("StringValue", "")):
                raise CorpusError(f"{entry.name}: SQS would refuse attribute {name}")
        if len(entry.attributes) > limits.SQS_MAX_MESSAGE_ATTRIBUTES:
            raise CorpusError(f"{entry.name}: more than {limits.SQS_MAX_MESSAGE_ATTRIBUTES} attributes")


def generate() -> list[BadInput]:
    entries = [entry for build in CLASSES for entry in build()]
    check(entries)
    return entries


def render(entries: Iterable[BadInput]) -> str:
    """The corpus file: ASCII JSON (lone surrogates survive only as escapes), one entry per line."""
    header = {
        "about": "Hostile SQS messages for the worker harness: chaos/corpus.py writes this file, "
        "tests/unit/worker/test_bad_inputs.py replays it.",
        "regenerate": "python -m chaos.corpus --output chaos/bad_inputs.json",
        "format": FORMAT,
        "hypothesis": HYPOTHESIS_VERSION,
        "seed": SEED,
        "now": NOW.isoformat().replace("+00:00", "Z"),
    }
    lines = [json.dumps(entry.to_json(), ensure_ascii=True, sort_keys=False) for entry in entries]
    head = json.dumps(header, ensure_ascii=True)[:-1]
    return head + ', "entries": [\n' + ",\n".join(lines) + "\n]}\n"


@dataclass(frozen=True)
class Corpus:
    now: datetime
    entries: tuple[BadInput, ...]

    def classes(self) -> list[str]:
        return list(dict.fromkeys(entry.cls for entry in self.entries))


def load(path: Path = DEFAULT_OUTPUT) -> Corpus:
    try:
        document = json.loads(path.read_text(encoding="ascii"))
    except (OSError, ValueError) as error:
        raise CorpusError(f"cannot read the corpus {path}: {error}") from error
    if document.get("format") != FORMAT:
        raise CorpusError(f"{path}: format {document.get('format')!r}, expected {FORMAT}")
    entries = tuple(BadInput.from_json(entry) for entry in document["entries"])
    check(entries)
    return Corpus(now=datetime.fromisoformat(document["now"].replace("Z", "+00:00")), entries=entries)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.corpus", description="Write the bad-input corpus.")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write it (default: %(default)s)")
    options = parser.parse_args(argv)
    try:
        if hypothesis.__version__ != HYPOTHESIS_VERSION:
            raise CorpusError(
                f"hypothesis {hypothesis.__version__} is installed; the corpus is drawn with {HYPOTHESIS_VERSION}"
            )
        entries = generate()
        options.output.write_text(render(entries), encoding="ascii")
    except (CorpusError, OSError) as error:
        print(f"chaos.corpus: {error}", file=sys.stderr)  # noqa: T201 - the CLI's one-line error
        return 1
    classes = len({entry.cls for entry in entries})
    print(f"wrote {len(entries)} entries in {classes} classes to {options.output}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
