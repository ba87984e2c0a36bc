"""An HTTP client for the webhooks and APIs jobs call: bounded in time, retried only when safe, honest about 429s.

Built on urllib3, which every Lambda Python runtime already has (it is botocore's HTTP
library), so a job gets it with no new dependency in the worker bundle and no import cost at a
cold start that boto3 did not already pay. Written against the API urllib3 1.26 and 2.x share.

The policy, and why:

- Timeouts are always set (``urllib3.Timeout(connect=, read=)``), and never longer than the
  job has left (``ctx.remaining_time()``): a request without one can hang past the job's budget,
  and a worker thread of the local runtime cannot be interrupted.
- urllib3's own retries are off (``retries=False``): this module decides what is retried, so
  nothing is retried twice over. Redirects are followed for GET only: a redirected POST or PUT
  would be re-sent to a place the caller never named, as a different method on some servers.
- In process, a request is retried a few times with full jitter only when sending it again is
  safe: an idempotent method (GET, HEAD, OPTIONS, PUT, DELETE), or any method with an
  idempotency key (sent as ``Idempotency-Key``), which the service dedupes on. A sleep never
  reaches past the job's remaining time: what does not fit is left to the queue's retry, which
  does not bill waiting.
- 408, 429 and 5xx are transient; so are connection failures and timeouts. The last one raises
  ``RetryableError``. A ``Retry-After`` (seconds or an HTTP date) is waited out in process when
  short and within the job's time, else carried on the error as ``retry_after`` so the harness
  comes back no sooner than the service asked.
- Any other 4xx (and a 3xx that is not followed) is the request's fault: ``PermanentError``
  naming the status, so the job is dead-lettered rather than retried to no end.
- With ``ctx`` and ``destination``, every attempt goes through ``ctx.call(destination, ...)``:
  the destination's shared rate limit, concurrency cap and breaker apply to each one, and a
  transient failure is raised inside the call, so it counts against the breaker. A permanent
  answer leaves the call first: a 404 is the caller's fault, not a sign the service is down.
- A request's body is never logged nor put in an error (it may hold a customer's data or a
  secret), and neither is its URL's path or query (webhook URLs often carry a token): errors
  and logs name the method, the host and the status.
"""

import json as json_module
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import partial
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import urlsplit

import urllib3
from aws_lambda_powertools import Logger
from urllib3.exceptions import HTTPError, LocationValueError, MaxRetryError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError
from urllib3.util.retry import Retry

from conveyor.contract import limits
from conveyor.contract.declarations import full_jitter
from conveyor.contract.errors import PermanentError, RetryableError, require
from conveyor.contract.job_context import JobContext
from conveyor.contract.settings import SERVICE_NAME

logger = Logger(service=SERVICE_NAME)

# Methods that RFC 9110 (section 9.2.2) defines as idempotent, less TRACE, which no job sends:
# sending one again leaves the service as sending it once did, so a retry is safe without a key.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# The header services that dedupe on a client's key read (Stripe's, the IETF httpapi draft's).
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
# Statuses worth retrying: Request Timeout, Too Many Requests, and every server error.
TRANSIENT_4XX = frozenset({HTTPStatus.REQUEST_TIMEOUT, HTTPStatus.TOO_MANY_REQUESTS})
# Redirects a GET follows before the last one is taken as the answer (and refused as a 3xx):
# browsers stop at about 20; an API redirecting more than a few times is misconfigured.
MAX_REDIRECTS = 5
# After a sleep, an attempt needs at least this long to be worth making (a TCP and TLS
# handshake with a nearby service); with less left, the queue's retry makes it instead.
MIN_ATTEMPT_TIME = timedelta(milliseconds=250)
# In-process retries a policy may ask for. More belong to the queue's retry, which spreads
# them over minutes and does not bill the wait as Lambda time.
MAX_IN_PROCESS_RETRIES = 5
# The longest a policy may wait in process, between attempts or for a Retry-After: Lambda
# bills waiting as working, and the queue can wait for free.
MAX_IN_PROCESS_WAIT = timedelta(minutes=1)
# A Retry-After past this is read as this: SQS cannot hide a message for longer, so a later
# return means nothing to the queue (and a huge value would overflow a timedelta).
MAX_RETRY_AFTER = limits.SQS_MAX_VISIBILITY_TIMEOUT
# Retry-After's delta-seconds form: ASCII digits only (RFC 9110, section 10.2.3).
_DELTA_SECONDS = re.compile(r"[0-9]+", re.ASCII)


@dataclass(frozen=True)
class HttpPolicy:
    """How long to wait and how often to try again, for one kind of request; checked when built.

    ``retries`` are in-process retries after the first attempt, made only when sending again is
    safe; ``backoff_base`` and ``backoff_cap`` bound each full-jitter wait (a random share of
    ``base * 2**n``, at most ``cap``); a ``Retry-After`` up to ``max_retry_after`` is waited out
    in process, a longer one is handed to the queue's retry.
    """

    connect_timeout: timedelta = timedelta(seconds=3)
    read_timeout: timedelta = timedelta(seconds=10)
    retries: int = 2
    backoff_base: timedelta = timedelta(milliseconds=200)
    backoff_cap: timedelta = timedelta(seconds=2)
    max_retry_after: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        where = "HttpPolicy"
        for name in ("connect_timeout", "read_timeout", "backoff_base", "backoff_cap", "max_retry_after"):
            value = getattr(self, name)
            require(isinstance(value, timedelta), where, f"{name} must be a timedelta, got {value!r}")
        for name, value in (("connect_timeout", self.connect_timeout), ("read_timeout", self.read_timeout)):
            require(
                timedelta(0) < value <= limits.LAMBDA_MAX_TIMEOUT,
                where,
                f"{name} must be positive and at most Lambda's 15min, got {value.total_seconds():g}s",
            )
        require(
            isinstance(self.retries, int)
            and not isinstance(self.retries, bool)
            and 0 <= self.retries <= MAX_IN_PROCESS_RETRIES,
            where,
            f"retries must be a whole number from 0 to {MAX_IN_PROCESS_RETRIES}, got {self.retries!r}",
        )
        require(
            timedelta(0) < self.backoff_base <= self.backoff_cap <= MAX_IN_PROCESS_WAIT,
            where,
            f"backoff must satisfy 0 < base <= cap <= {MAX_IN_PROCESS_WAIT.total_seconds():g}s, got base "
            f"{self.backoff_base.total_seconds():g}s and cap {self.backoff_cap.total_seconds():g}s",
        )
        require(
            timedelta(0) <= self.max_retry_after <= MAX_IN_PROCESS_WAIT,
            where,
            f"max_retry_after must be from 0 to {MAX_IN_PROCESS_WAIT.total_seconds():g}s, "
            f"got {self.max_retry_after.total_seconds():g}s",
        )


@dataclass(frozen=True)
class HttpResponse:
    """A successful answer, read whole: the status, the headers (case-insensitive) and the body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json_module.loads(self.body)


class RawResponse(Protocol):
    """What this module reads of a urllib3 response (``urllib3.response.HTTPResponse``)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def data(self) -> bytes: ...


class Pool(Protocol):
    """What this module calls of a ``urllib3.PoolManager``: its ``request``, as urllib3 1.26 and 2.x both take it.

    Tests and the example app's fake receivers pass their own, answering without a network.
    """

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout: urllib3.Timeout,
        retries: Retry | bool,
        redirect: bool,
    ) -> RawResponse: ...


class _TransientError(RetryableError):
    """A transient failure of one attempt, raised inside ``ctx.call`` so the breaker counts it.

    Private, so that it is told apart from a ``JobTimeoutError`` (also a ``RetryableError``)
    raised through the same code; the caller sees a plain ``RetryableError``.
    """


class HttpClient:
    """Requests under an ``HttpPolicy``: see the module's docstring for the behaviour, status by status.

    ``pool`` is a ``urllib3.PoolManager`` (one per client, so connections are reused across the
    jobs a warm worker runs) or anything with its ``request``; ``rng``, ``sleep`` and ``now``
    are the jitter's randomness, the wait between attempts and the clock an HTTP-date
    ``Retry-After`` is read against, so tests decide them.
    """

    def __init__(
        self,
        policy: HttpPolicy = HttpPolicy(),
        *,
        pool: Pool | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.policy = policy
        self._pool: Pool = pool if pool is not None else urllib3.PoolManager()
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not a secret
        self._sleep = sleep
        self._now = now

    def get(
        self,
        url: str,
        *,
        ctx: JobContext | None = None,
        destination: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        return self.request("GET", url, ctx=ctx, destination=destination, headers=headers)

    def post(
        self,
        url: str,
        *,
        ctx: JobContext | None = None,
        destination: str | None = None,
        body: bytes | str | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> HttpResponse:
        return self.request(
            "POST",
            url,
            ctx=ctx,
            destination=destination,
            body=body,
            json=json,
            headers=headers,
            idempotency_key=idempotency_key,
        )

    def request(
        self,
        method: str,
        url: str,
        *,
        ctx: JobContext | None = None,
        destination: str | None = None,
        body: bytes | str | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> HttpResponse:
        """Send the request, retrying in process when safe; a 2xx (or 304) answer, else an error.

        Raises ``RetryableError`` (with ``retry_after`` when the service said when) for what a
        later attempt may fix, ``PermanentError`` for what it cannot, and ``Throttled`` from
        ``ctx.call`` when the destination cannot take the call now.
        """
        if destination is not None and ctx is None:
            raise ValueError("a destination's limits need the job's ctx: pass ctx= with destination=")
        if body is not None and json is not None:
            raise ValueError("pass body= or json=, not both")
        method = method.upper()
        sent_headers = dict(headers or {})
        if json is not None:
            payload: bytes | None = json_module.dumps(json, separators=(",", ":")).encode()
            if not any(name.lower() == "content-type" for name in sent_headers):
                sent_headers["Content-Type"] = "application/json"
        else:
            payload = body.encode() if isinstance(body, str) else body
        if idempotency_key is not None:
            sent_headers[IDEMPOTENCY_KEY_HEADER] = idempotency_key
        attempts = 1 + self.policy.retries if method in IDEMPOTENT_METHODS or idempotency_key is not None else 1
        where = _where(method, url, destination)
        log = ctx.logger if ctx is not None else logger

        for attempt in range(attempts):
            attempt_once = partial(self._attempt, method, url, payload, sent_headers, self._timeout(ctx, where), where)
            try:
                raw = ctx.call(destination, attempt_once) if ctx is not None and destination else attempt_once()
            except _TransientError as failure:
                delay = self._delay(attempt, failure.retry_after)
                if attempt + 1 >= attempts or delay is None or not _fits(ctx, delay):
                    raise RetryableError(str(failure), retry_after=failure.retry_after) from failure.__cause__
                log.info(
                    "HTTP request retried in process",
                    extra={"http": where, "failure": str(failure), "retry_in_s": round(delay.total_seconds(), 3)},
                )
                self._sleep(delay.total_seconds())
                continue
            return _settled(raw, where)
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _attempt(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout: urllib3.Timeout,
        where: str,
    ) -> RawResponse:
        """One attempt: the answer unless it is transient, which raises ``_TransientError``."""
        follow = method == "GET"
        try:
            raw = self._pool.request(
                method,
                url,
                body=body,
                headers=headers,
                timeout=timeout,
                retries=_redirects_only() if follow else False,
                redirect=follow,
            )
        except MaxRetryError as error:  # only a GET's redirects use a Retry: its errors come wrapped
            raise _failure(error.reason or error, where) from error.reason
        except HTTPError as error:
            raise _failure(error, where) from error
        if raw.status >= HTTPStatus.INTERNAL_SERVER_ERROR or raw.status in TRANSIENT_4XX:
            retry_after = parse_retry_after(raw.headers.get("Retry-After"), self._now())
            said = f", Retry-After {retry_after.total_seconds():g}s" if retry_after is not None else ""
            raise _TransientError(f"{where} answered {_status(raw.status)}{said}", retry_after=retry_after)
        return raw

    def _timeout(self, ctx: JobContext | None, where: str) -> urllib3.Timeout:
        """The policy's timeouts, cut to the job's remaining time; none left raises ``RetryableError``."""
        connect, read = self.policy.connect_timeout, self.policy.read_timeout
        if ctx is not None:
            left = ctx.remaining_time()
            if left < MIN_ATTEMPT_TIME:
                raise RetryableError(f"{where}: not sent, {left.total_seconds():.3g}s left of the job's time")
            connect, read = min(connect, left), min(read, left)
        return urllib3.Timeout(connect=connect.total_seconds(), read=read.total_seconds())

    def _delay(self, attempt: int, retry_after: timedelta | None) -> timedelta | None:
        """The wait before the next attempt: full jitter, and no sooner than a Retry-After; None if too long."""
        if retry_after is not None and retry_after > self.policy.max_retry_after:
            return None
        # ``attempt`` counts from 0 here, from 1 in full_jitter.
        jittered = full_jitter(attempt + 1, self.policy.backoff_base, self.policy.backoff_cap, self._rng)
        return max(jittered, retry_after) if retry_after is not None else jittered


def parse_retry_after(value: str | None, now: datetime) -> timedelta | None:
    """A ``Retry-After`` header as a wait from ``now``: delta-seconds or an HTTP date; None if absent or unreadable.

    A date in the past is no wait; anything past ``MAX_RETRY_AFTER`` is read as it.
    """
    if value is None or not value.strip():
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        # More digits than the cap has are past it: read no further than that (a huge one would overflow).
        if len(value) > len(str(int(MAX_RETRY_AFTER.total_seconds()))):
            return MAX_RETRY_AFTER
        seconds = float(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110's IMF-fixdate is GMT; the obsolete forms carry no zone
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, (when - now).total_seconds())
    return min(timedelta(seconds=seconds), MAX_RETRY_AFTER)


def _redirects_only() -> Retry:
    """urllib3 retrying nothing but a GET's redirects: errors are raised as they are, retries are this module's."""
    return Retry(
        total=None,
        connect=False,
        read=False,
        status=0,
        other=0,
        redirect=MAX_REDIRECTS,
        raise_on_redirect=False,
        raise_on_status=False,
        respect_retry_after_header=False,
    )


def _failure(error: BaseException, where: str) -> Exception:
    """A urllib3 error as this module raises it: a URL that can never work is permanent, the rest transient."""
    if isinstance(error, LocationValueError):
        return PermanentError(f"{where}: the URL cannot be requested ({type(error).__name__})")
    if isinstance(error, NewConnectionError):
        what = "could not connect"
    elif isinstance(error, Urllib3TimeoutError):
        what = "timed out"
    else:
        what = "failed"
    return _TransientError(f"{where}: {what} ({type(error).__name__})")


def _settled(raw: RawResponse, where: str) -> HttpResponse:
    """A non-transient answer: a 2xx or 304 as the response, anything else as ``PermanentError``."""
    if raw.status < HTTPStatus.MULTIPLE_CHOICES or raw.status == HTTPStatus.NOT_MODIFIED:
        return HttpResponse(status=raw.status, headers=raw.headers, body=raw.data)
    raise PermanentError(f"{where} answered {_status(raw.status)}")


def _fits(ctx: JobContext | None, delay: timedelta) -> bool:
    """Whether a wait of ``delay`` still leaves an attempt its time before the job's own end."""
    return ctx is None or delay + MIN_ATTEMPT_TIME <= ctx.remaining_time()


def _where(method: str, url: str, destination: str | None) -> str:
    """The request as errors and logs name it: method and host, never the path or query, which may hold a token."""
    host = urlsplit(url).hostname or "?"
    return f"{method} {host}" + (f" ({destination})" if destination else "")


def _status(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)
