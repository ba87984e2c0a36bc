"""The limits table: where every worker keeps the shared state of the declared destinations.

One DynamoDB table, keyed on the string ``pk``; each kind of state is its own item, so a busy
destination's rate bucket never contends with its breaker:

- ``rate#<destination>`` (``rate#<destination>#<key value>`` for a per-key limit): the rate
  bucket's theoretical arrival time (conveyor.worker.destinations.rate);
- ``slots#<destination>``: the concurrency slots in use, holder -> expiry (.slots);
- ``breaker#<destination>``: the breaker's state, failures in its window and probes (.breaker);
- ``budget#<scope>#<window start>``: first attempts and retries in one budget window (.budget),
  where the scope is ``queue:<name>`` or ``destination:<name>``;
- ``override#<destination>``: an operator's ``conveyor limits set`` (rate, burst, concurrency),
  which workers read at most every OVERRIDE_REFRESH and apply instead of the declaration.

Items that only matter for a while (per-key buckets of idle tenants, old budget windows) carry
``expires_at`` in whole epoch seconds, the table's TTL attribute. Times inside items are epoch
seconds as DynamoDB numbers, compared in conditions against the caller's clock: the clock skew
between workers must stay well under the shortest interval a limit declares.
"""

KEY = "pk"
EXPIRES_AT = "expires_at"

# rate#: the bucket's theoretical arrival time (GCRA), epoch seconds.
TAT = "tat"
# slots#: holder id -> the epoch second its slot expires.
HOLDERS = "holders"
# breaker#: its state (a BreakerState value), until when it is open, when it opened, the failures
# (and calls) counted in the window that started at window_start, the half-open probes handed out,
# ``forced`` = "open" while an operator holds it open, and the last transition's reason and author.
STATE = "state"
OPEN_UNTIL = "open_until"
OPENED_AT = "opened_at"
FAILURES = "failures"
CALLS = "calls"
WINDOW_START = "window_start"
PROBES = "probes"
FORCED = "forced"
REASON = "reason"
CHANGED_BY = "changed_by"
CHANGED_AT = "changed_at"
# breaker#: its latest transitions (from, to, reason, by, at; .breaker.HISTORY_SIZE of them), and the count of
# all of them, which each transition's write requires unchanged, so the history it rewrites is the current one.
HISTORY = "history"
TRANSITIONS = "transitions"
# budget#: first attempts and retries counted in the window.
FIRST = "first"
RETRIES = "retries"
# override#: what `conveyor limits set` changed (absent attributes keep the declaration), and who.
RATE = "rate"
PER_S = "per_s"
BURST = "burst"
CONCURRENCY = "concurrency"
SET_BY = "set_by"
SET_AT = "set_at"
# How stale a worker's copy of an override may be: one read per destination per worker this often.
OVERRIDE_REFRESH_S = 5.0
# What the worker's modules call: conditional updates (never a put: an item keeps its counters and an
# operator's override), a consistent read where a condition failure did not return the item, and one
# BatchGetItem for a retry budget's two windows (.budget).
WORKER_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:BatchGetItem")


def rate_key(destination: str, key_value: str | None = None) -> str:
    return f"rate#{destination}" if key_value is None else f"rate#{destination}#{key_value}"


def slots_key(destination: str) -> str:
    return f"slots#{destination}"


def breaker_key(destination: str) -> str:
    return f"breaker#{destination}"


def override_key(destination: str) -> str:
    return f"override#{destination}"


def budget_key(scope: str, window_start: int) -> str:
    return f"budget#{scope}#{window_start}"


def queue_scope(queue: str) -> str:
    return f"queue:{queue}"


def destination_scope(destination: str) -> str:
    return f"destination:{destination}"
