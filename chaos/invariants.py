"""The invariant checker: what the system recorded, held to what the plan says must have happened.

Everything is read back from the system's own records after the run (the effects ledger, the
DLQs, the idempotency table, the queues, the embedded AWS's strict-mode log), never from what
the supervisor believes it did. Each invariant names the first job that breaks it, with what
the records say of it, so a failing seed can be replayed and the job followed.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.plan import DEDUPING_PROVIDERS, PlannedJob, provider_of
from chaos.run import RunRecord
from chaos.topology import TOPOLOGY
from conveyor.contract import message_attributes as attrs
from conveyor.local.demo import Invariant, read_dead_letters
from conveyor.local.provision import Provisioned
from conveyor.worker.idempotency import IdempotentRunner
from functions.providers.effects import EFFECTS_TABLE, KEY_ATTRIBUTE

# What may make a provider that does not deduplicate apply an effect a second time: the worker
# process ended (a crash fault, a SIGKILL) or the idempotency record could not be saved (a
# throttle) between the effect and the record. No job system closes that window without the
# provider's help (docs/reliability.md); chaos.faults journals each window that one of these cut.
EFFECT_WINDOW_FAULTS = frozenset({"crash_after_effect", "throttle_dynamodb", "SIGKILL"})


@dataclass(frozen=True)
class Applied:
    calls: int
    applied: int


@dataclass
class Findings:
    """The figures the report shows, beside the invariants."""

    jobs: int = 0
    succeeded: int = 0
    dead_lettered: int = 0
    lost: list[str] = field(default_factory=list)
    # Effects applied more than once: on a deduping provider (a defect) or not (the documented window).
    doubled_deduping: list[str] = field(default_factory=list)
    doubled_in_window: Counter[str] = field(default_factory=Counter)
    doubled_unexplained: list[str] = field(default_factory=list)
    # Jobs dead-lettered more than once: a crash between the DLQ send and the ack.
    dead_letters_repeated: int = 0
    unplanned_dead_letters: list[str] = field(default_factory=list)
    poison_by_class: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    invariants: list[Invariant] = field(default_factory=list)


def read_effects(dynamodb: Any, table: str) -> dict[str, Applied]:
    effects: dict[str, Applied] = {}
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            effects[item[KEY_ATTRIBUTE]["S"]] = Applied(
                calls=int(item.get("calls", {"N": "0"})["N"]), applied=int(item.get("applied", {"N": "0"})["N"])
            )
    return effects


def check(
    record: RunRecord,
    *,
    sqs: Any,
    dynamodb: Any,
    window_faults: Mapping[str, int],
    leftover_processes: list[str],
) -> Findings:
    """Every invariant of the run, from the system's records; ``window_faults``: effect key -> faults in its window."""
    assert record.provisioned is not None
    provisioned: Provisioned = record.provisioned
    findings = Findings(jobs=len(record.planned))
    effects = read_effects(dynamodb, provisioned.tables[EFFECTS_TABLE.name])
    dead_letters = read_dead_letters(sqs, provisioned)
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_body: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for message in dead_letters:
        job_id = _attribute(message, attrs.JOB_ID)
        if job_id:
            by_job[job_id].append(message)
        by_body[message["Body"]].append(message)
    completed = _completed(record.planned, dynamodb, provisioned)

    wrong_ends: list[str] = []
    for job_id, job in record.planned.items():
        letters = by_job.get(job_id, [])
        findings.dead_letters_repeated += max(0, len(letters) - 1)
        if job.dead is not None:
            reasons = {_attribute(letter, attrs.REASON) or "-" for letter in letters}
            if reasons != {job.dead.value}:
                wrong_ends.append(f"{job_id}: planned dead-lettered ({job.dead.value}), DLQ reasons {sorted(reasons)}")
            findings.dead_lettered += bool(letters)
            continue
        if letters:
            reason, error = _attribute(letters[0], attrs.REASON), _attribute(letters[0], attrs.ERROR)
            findings.unplanned_dead_letters.append(f"{job_id} ({_job_name(job)}): {reason} - {error}")
        elif not completed[job_id]:
            findings.lost.append(f"{job_id} ({_job_name(job)}): not completed, not dead-lettered")
        else:
            findings.succeeded += 1
        findings.lost.extend(
            f"{job_id}: effect {key} never applied"
            for key in job.effects
            if effects.get(key, Applied(0, 0)).applied < 1
        )

    for key, effect in effects.items():
        if effect.applied <= 1:
            continue
        extra = effect.applied - 1
        if provider_of(key) in DEDUPING_PROVIDERS:
            findings.doubled_deduping.append(f"{key}: applied {effect.applied} times")
        elif extra <= window_faults.get(key, 0):
            findings.doubled_in_window[provider_of(key)] += extra
        else:
            findings.doubled_unexplained.append(
                f"{key}: applied {effect.applied} times, {window_faults.get(key, 0)} faults in its window"
            )

    poison_missing: list[str] = []
    for entry in record.poison:
        letters = by_body.get(entry.body, [])
        found = sorted({_attribute(letter, attrs.REASON) or "-" for letter in letters})
        outcome = ", ".join(found) if letters else "completed"
        findings.poison_by_class[entry.cls][outcome] += 1
        if entry.expected_reason is None and letters:
            poison_missing.append(f"{entry.name}: a good input was dead-lettered ({outcome})")
        elif entry.expected_reason is not None and found != [entry.expected_reason.value]:
            poison_missing.append(f"{entry.name}: expected {entry.expected_reason.value}, found {outcome}")

    findings.invariants = [
        Invariant(
            "the queues drained: nothing visible, delayed or in flight",
            record.drained,
            f"after {record.drain_s:.0f}s of draining",
        ),
        Invariant(
            "0 lost: every job completed or was dead-lettered as planned", not findings.lost, _first(findings.lost)
        ),
        Invariant(
            "every job ended as planned: dead-lettered with its reason, or not dead-lettered at all",
            not wrong_ends and not findings.unplanned_dead_letters,
            _first(wrong_ends + findings.unplanned_dead_letters),
        ),
        Invariant(
            "0 doubled effects on providers that honour an idempotency key",
            not findings.doubled_deduping,
            _first(findings.doubled_deduping),
        ),
        Invariant(
            "effects of providers that do not deduplicate doubled only inside the documented window",
            not findings.doubled_unexplained,
            _first(findings.doubled_unexplained)
            if findings.doubled_unexplained
            else f"{sum(findings.doubled_in_window.values())} inside the window: {dict(findings.doubled_in_window)}",
        ),
        Invariant(
            "every bad input is in its queue's DLQ with its reason and original body; good ones completed",
            not poison_missing,
            _first(poison_missing) if poison_missing else f"{len(record.poison)} inputs",
        ),
        Invariant(
            "0 strict-mode violations: no request AWS would have refused", not record.refusals, _first(record.refusals)
        ),
        Invariant("no process left behind", not leftover_processes, _first(leftover_processes)),
    ]
    return findings


def _completed(planned: Mapping[str, PlannedJob], dynamodb: Any, provisioned: Provisioned) -> dict[str, bool]:
    """Whether each job's idempotency record says it completed (its own run, or the one it duplicated)."""
    runners: dict[str, IdempotentRunner] = {}
    table = provisioned.idempotency_table
    result: dict[str, bool] = {}
    for job_id, job in planned.items():
        name = _job_name(job)
        job_type = TOPOLOGY.job_type(name)
        runner = runners.setdefault(name, IdempotentRunner(job_type, table_name=table, dynamodb_client=dynamodb))
        payload = job_type.load_payload(job.request.payload, job_type.version)  # type: ignore[arg-type]
        key = job_type.idempotency_key_for(job_id=job_id, dedupe_key=job.request.dedupe_key, payload=payload)
        result[job_id] = runner.completed(key)
    return result


def _job_name(job: PlannedJob) -> str:
    return job.request.job if isinstance(job.request.job, str) else job.request.job.name


def _attribute(message: Mapping[str, Any], name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name)
    return None if value is None else str(value.get("StringValue"))


def _first(problems: Iterable[str]) -> str:
    listed = list(problems)
    return "none" if not listed else listed[0] + (f" (and {len(listed) - 1} more)" if len(listed) > 1 else "")
