"""The HTTP client's policy, against a real HTTP server on 127.0.0.1, and the webhook job on its fake receiver.

The server (``http.server.ThreadingHTTPServer`` on port 0, in a thread) answers each path from
a script the test writes and records every request it gets, so a test counts the attempts
that reached it. Waits between attempts go through an injected ``sleep`` that records them, and
the job's remaining time through a context on a fake clock that the recorded sleeps advance:
tests assert on the recorded sleeps and on what the server saw, never on the wall clock.
"""

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn, TypeVar, cast

import pytest
import urllib3
from aws_lambda_powertools import Logger
from urllib3.util.retry import Retry

from conveyor.contract.envelope import Correlation
from conveyor.contract.errors import DeclarationError, PermanentError, RetryableError, Throttled
from conveyor.contract.job_context import Guard, JobContext, Unguarded
from conveyor.contract.reasons import SnoozeReason
from conveyor.worker.http_client import (
    IDEMPOTENCY_KEY_HEADER,
    MAX_REDIRECTS,
    MAX_RETRY_AFTER,
    MIN_ATTEMPT_TIME,
    HttpClient,
    HttpPolicy,
    parse_retry_after,
)
from functions.jobs.deliver_webhook import Webhook, deliver_webhook
from functions.providers.effects import Effect, EffectsLedger
from functions.providers.webhooks import effect_key
from tests.aws import Aws

T = TypeVar("T")

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SECRET = "s3cr3t-body-4242"
PATH_TOKEN = "tok-in-path-77"
# Waits short enough to be recorded rather than felt; the fake sleep never waits anyway.
FAST = HttpPolicy(backoff_base=timedelta(milliseconds=100), backoff_cap=timedelta(milliseconds=100))


# --- the server -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    # Seconds to wait before answering (cut short when the test ends).
    delay_s: float = 0.0


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Script:
    """What the server answers on each path (the last answer repeats), and every request it saw."""

    port: int
    answers: dict[str, list[Answer]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, *answers: Answer) -> str:
        self.answers[path] = list(answers)
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests(self, path: str) -> list[Seen]:
        with self.lock:
            return [seen for seen in self.seen if seen.path == path]

    def next_answer(self, seen: Seen) -> Answer:
        with self.lock:
            self.seen.append(seen)
            queue = self.answers.get(seen.path, [Answer()])
            return queue.pop(0) if len(queue) > 1 else queue[0]


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True
    script: Script


class ScriptedHandler(BaseHTTPRequestHandler):
    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        seen = Seen(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
        script = cast(ScriptedServer, self.server).script
        answer = script.next_answer(seen)
        if answer.delay_s:
            script.done.wait(answer.delay_s)
        try:
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a read timeout)
            pass

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _handle  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the script's record instead."""


@pytest.fixture
def server() -> Iterator[Script]:
    httpd = ScriptedServer(("127.0.0.1", 0), ScriptedHandler)
    httpd.script = Script(port=httpd.server_address[1])
    # A short poll, so shutdown() at the end of each test returns at once rather than after 0.5 s.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), name="scripted-http-server", daemon=True)
    thread.start()
    yield httpd.script
    httpd.script.done.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join()


# --- contexts, guards, clocks -------------------------------------------------------------------


class NoProgress:
    def resume_state(self) -> dict[str, Any] | None:
        return None

    def checkpoint(self, state: object) -> None:
        raise AssertionError("not expected")

    def continue_later(self, state: object) -> NoReturn:
        raise AssertionError("not expected")


@dataclass
class FakeClock:
    """Monotonic seconds that move only when the client's recorded ``sleep`` is called."""

    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass(frozen=True)
class ClockedContext(JobContext):
    """A job context whose remaining time runs on ``clock``, so a test decides it."""

    clock: FakeClock = field(default_factory=FakeClock, repr=False)

    def remaining_time(self) -> timedelta:
        return timedelta(seconds=max(0.0, self.deadline_monotonic - self.clock.now))


@dataclass
class RecordingGuard:
    """Every ``ctx.call``: the destination, and what the call raised (None when it returned)."""

    calls: list[tuple[str, type[BaseException] | None]] = field(default_factory=list)
    refuse: bool = False

    def limit(self, destination: str, *, key: str | None = None) -> AbstractContextManager[None]:
        raise AssertionError("the client calls through ctx.call")

    def call(self, destination: str, fn: Callable[[], T], *, key: str | None = None) -> T:
        if self.refuse:
            raise Throttled(SnoozeReason.BREAKER_OPEN, destination, timedelta(seconds=30))
        try:
            result = fn()
        except BaseException as error:
            self.calls.append((destination, type(error)))
            raise
        self.calls.append((destination, None))
        return result


def context(*, seconds_left: float = 30.0, clock: FakeClock | None = None, guard: Guard | None = None) -> JobContext:
    return ClockedContext(
        job_id="job-1",
        job_type="deliver_webhook",
        attempt=1,
        max_attempts=10,
        idempotency_key="job-1",
        created_at=NOW,
        correlation=Correlation(),
        logger=Logger(service="test"),
        deadline_monotonic=seconds_left,
        progress=NoProgress(),
        guard=guard or Unguarded(),
        clock=clock or FakeClock(),
    )


class TopOfRange:
    """A jitter that always draws the most it may: the longest waits the policy allows."""

    def uniform(self, low: float, high: float) -> float:
        return high


def client(policy: HttpPolicy = FAST, *, clock: FakeClock | None = None, **options: Any) -> HttpClient:
    return HttpClient(policy, sleep=(clock or FakeClock()).sleep, now=lambda: NOW, **options)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# --- timeouts and connections -------------------------------------------------------------------


# A GET (redirects followed, so urllib3 is given a Retry) and a POST (retries=False) fail alike.
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_server_slower_than_the_read_timeout_is_a_retryable_error(server: Script, method: str) -> None:
    url = server.answer("/slow", Answer(delay_s=30))
    policy = HttpPolicy(read_timeout=timedelta(milliseconds=200), retries=0)

    with pytest.raises(RetryableError, match="timed out") as raised:
        client(policy).request(method, url)

    assert raised.value.retry_after is None
    assert len(server.requests("/slow")) == 1


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_refused_connection_is_a_retryable_error(method: str) -> None:
    with pytest.raises(RetryableError, match="could not connect"):
        client(HttpPolicy(retries=0)).request(method, f"http://127.0.0.1:{closed_port()}/hook")


@dataclass
class RecordingPool:
    """A pool that records the keyword arguments of each request and answers 200."""

    requests: list[dict[str, Any]] = field(default_factory=list)

    def request(self, method: str, url: str, **kwargs: Any) -> urllib3.response.HTTPResponse:
        self.requests.append({"method": method, "url": url, **kwargs})
        return urllib3.response.HTTPResponse(body=b"ok", status=200, preload_content=True)


def test_every_request_carries_both_timeouts_and_no_urllib3_retries() -> None:
    pool = RecordingPool()
    http = client(HttpPolicy(connect_timeout=timedelta(seconds=2), read_timeout=timedelta(seconds=7)), pool=pool)

    http.post("https://api.example/a", json={"a": 1})
    http.request("PUT", "https://api.example/b", body="x")
    http.get("https://api.example/c")

    post, put, get = pool.requests
    for sent in (post, put, get):
        timeout = sent["timeout"]
        assert isinstance(timeout, urllib3.Timeout)
        assert (timeout.connect_timeout, timeout.read_timeout) == (2.0, 7.0)
    assert (post["retries"], post["redirect"]) == (False, False)
    assert (put["retries"], put["redirect"]) == (False, False)
    retry = get["retries"]
    assert isinstance(retry, Retry)
    assert get["redirect"] is True
    assert (retry.redirect, retry.connect, retry.read, retry.raise_on_redirect) == (MAX_REDIRECTS, False, False, False)
    assert post["body"] == b'{"a":1}'
    assert post["headers"]["Content-Type"] == "application/json"
    assert put["body"] == b"x"


def test_timeouts_are_cut_to_the_jobs_remaining_time() -> None:
    pool = RecordingPool()

    client(pool=pool).post("https://api.example/a", ctx=context(seconds_left=1.5))

    timeout = pool.requests[0]["timeout"]
    assert (timeout.connect_timeout, timeout.read_timeout) == (1.5, 1.5)


def test_a_job_with_no_time_left_sends_nothing() -> None:
    pool = RecordingPool()

    with pytest.raises(RetryableError, match="not sent"):
        client(pool=pool).post("https://api.example/a", ctx=context(seconds_left=MIN_ATTEMPT_TIME.total_seconds() / 2))

    assert pool.requests == []


def test_a_get_follows_redirects_and_a_post_does_not(server: Script) -> None:
    server.answer("/old", Answer(302, {"Location": "/new"}))
    server.answer("/new", Answer(200, body=b"moved here"))

    assert client().get(server.url("/old")).body == b"moved here"
    with pytest.raises(PermanentError, match="302 Found"):
        client().post(server.url("/old"), body=b"{}")
    assert len(server.requests("/new")) == 1


# --- what is retried in process -----------------------------------------------------------------


def test_a_503_is_retried_in_process_for_a_put(server: Script) -> None:
    url = server.answer("/put", Answer(503), Answer(503), Answer(200, body=b"done"))
    clock = FakeClock()

    response = client(clock=clock).request("PUT", url, body=b"{}")

    assert (response.status, response.body) == (200, b"done")
    assert len(server.requests("/put")) == 3
    assert len(clock.sleeps) == 2
    assert all(0 <= slept <= FAST.backoff_cap.total_seconds() for slept in clock.sleeps)


def test_a_503_is_retried_in_process_for_a_post_with_an_idempotency_key(server: Script) -> None:
    url = server.answer("/keyed", Answer(503), Answer(200))

    assert client().post(url, body=b"{}", idempotency_key="evt-1").status == 200

    seen = server.requests("/keyed")
    assert len(seen) == 2
    assert [request.headers[IDEMPOTENCY_KEY_HEADER] for request in seen] == ["evt-1", "evt-1"]


def test_a_503_is_not_retried_in_process_for_a_post_without_a_key(server: Script) -> None:
    url = server.answer("/unkeyed", Answer(503), Answer(200))
    clock = FakeClock()

    with pytest.raises(RetryableError, match="503 Service Unavailable"):
        client(clock=clock).post(url, body=b"{}")

    assert len(server.requests("/unkeyed")) == 1
    assert clock.sleeps == []


@pytest.mark.parametrize("status", [408, 429, 500, 502, 504])
def test_timeouts_throttles_and_server_errors_are_retryable(server: Script, status: int) -> None:
    url = server.answer("/transient", Answer(status))

    with pytest.raises(RetryableError, match=str(status)):
        client(HttpPolicy(retries=0)).get(url)


def test_retries_stop_after_the_policys_count(server: Script) -> None:
    url = server.answer("/down", Answer(503))
    clock = FakeClock()

    with pytest.raises(RetryableError):
        client(HttpPolicy(retries=2), clock=clock).get(url)

    assert len(server.requests("/down")) == 3
    assert len(clock.sleeps) == 2


# --- Retry-After --------------------------------------------------------------------------------


def test_a_long_retry_after_is_handed_to_the_queue_without_sleeping(server: Script) -> None:
    url = server.answer("/busy", Answer(429, {"Retry-After": "120"}))
    clock = FakeClock()

    with pytest.raises(RetryableError, match="429 Too Many Requests") as raised:
        client(clock=clock).request("PUT", url, body=b"{}")

    assert raised.value.retry_after == timedelta(seconds=120)
    assert clock.sleeps == []
    assert len(server.requests("/busy")) == 1


def test_a_short_retry_after_is_waited_out_in_process(server: Script) -> None:
    url = server.answer("/brief", Answer(429, {"Retry-After": "1"}), Answer(200))
    clock = FakeClock()

    assert client(clock=clock, rng=TopOfRange()).get(url).status == 200

    assert clock.sleeps == [1.0]  # the service's word, longer than the 0.1 s jitter
    assert len(server.requests("/brief")) == 2


def test_a_retry_after_as_an_http_date_is_read_against_the_clock(server: Script) -> None:
    url = server.answer(
        "/dated", Answer(503, {"Retry-After": format_datetime(NOW + timedelta(minutes=3), usegmt=True)})
    )

    with pytest.raises(RetryableError) as raised:
        client().get(url)

    assert raised.value.retry_after == timedelta(minutes=3)
    assert len(server.requests("/dated")) == 1


def test_a_retry_after_is_kept_when_the_retries_run_out(server: Script) -> None:
    url = server.answer("/still-busy", Answer(429, {"Retry-After": "2"}))

    with pytest.raises(RetryableError) as raised:
        client(HttpPolicy(retries=1)).get(url)

    assert raised.value.retry_after == timedelta(seconds=2)
    assert len(server.requests("/still-busy")) == 2


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("0", timedelta(0)),
        (" 45 ", timedelta(seconds=45)),
        ("Tue, 01 Dec 2026 12:00:30 GMT", timedelta(seconds=30)),
        ("Tuesday, 01-Dec-26 12:00:30 GMT", timedelta(seconds=30)),  # RFC 850, obsolete but allowed
        ("Mon, 30 Nov 2026 12:00:00 GMT", timedelta(0)),  # in the past: no wait
        ("9" * 40, MAX_RETRY_AFTER),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date(header: str | None, expected: timedelta | None) -> None:
    assert parse_retry_after(header, NOW) == expected


# --- the job's remaining time -------------------------------------------------------------------


def test_no_sleep_reaches_past_the_jobs_remaining_time(server: Script) -> None:
    url = server.answer("/always-down", Answer(503))
    clock = FakeClock()
    policy = HttpPolicy(retries=5, backoff_base=timedelta(milliseconds=200), backoff_cap=timedelta(milliseconds=200))
    seconds_left = 1.0

    with pytest.raises(RetryableError):
        client(policy, clock=clock, rng=TopOfRange()).get(url, ctx=context(seconds_left=seconds_left, clock=clock))

    # Three waits of 0.2 s fit with an attempt's time after each; a fourth would not.
    assert clock.sleeps == [0.2, 0.2, 0.2]
    assert sum(clock.sleeps) + MIN_ATTEMPT_TIME.total_seconds() <= seconds_left
    assert len(server.requests("/always-down")) == 4


def test_a_retry_after_longer_than_the_remaining_time_is_not_slept(server: Script) -> None:
    url = server.answer("/later", Answer(503, {"Retry-After": "3"}), Answer(200))
    clock = FakeClock()

    with pytest.raises(RetryableError) as raised:
        client(clock=clock).get(url, ctx=context(seconds_left=2.0, clock=clock))

    assert raised.value.retry_after == timedelta(seconds=3)
    assert clock.sleeps == []
    assert len(server.requests("/later")) == 1


# --- permanent answers --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_other_4xx_answers_are_permanent_and_name_the_status(server: Script, status: int) -> None:
    url = server.answer("/rejected", Answer(status))
    clock = FakeClock()

    with pytest.raises(PermanentError, match=f"answered {status}"):
        client(clock=clock).request("PUT", url, body=b"{}")

    assert len(server.requests("/rejected")) == 1
    assert clock.sleeps == []


def test_a_url_that_cannot_be_requested_is_permanent() -> None:
    with pytest.raises(PermanentError, match="cannot be requested"):
        client().post("ftp://files.example/x", body=b"{}")


# --- nothing sensitive leaves -------------------------------------------------------------------


def _messages(error: BaseException) -> str:
    """Every message and repr along the error's chain of causes and contexts."""
    texts: list[str] = []
    seen: BaseException | None = error
    while seen is not None:
        texts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


@pytest.mark.parametrize("answer", [Answer(400), Answer(503), Answer(429, {"Retry-After": "600"}), Answer(delay_s=30)])
def test_the_body_and_the_urls_path_never_appear_in_an_error(
    server: Script, answer: Answer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = f"/hooks/{PATH_TOKEN}"
    url = server.answer(path, answer)
    http = client(HttpPolicy(read_timeout=timedelta(milliseconds=200)))

    sends: list[Callable[[], object]] = [
        lambda: http.post(url, body=f'{{"card": "{SECRET}"}}'),
        lambda: http.post(url, json={"card": SECRET}, idempotency_key="k-1"),
    ]
    for send in sends:
        with pytest.raises((PermanentError, RetryableError)) as raised:
            send()
        assert SECRET not in _messages(raised.value)
        assert PATH_TOKEN not in _messages(raised.value)
    logged = capsys.readouterr()
    assert SECRET not in logged.out + logged.err
    assert PATH_TOKEN not in logged.out + logged.err


def test_a_refused_connection_names_neither_body_nor_path() -> None:
    with pytest.raises(RetryableError) as raised:
        client().post(f"http://127.0.0.1:{closed_port()}/hooks/{PATH_TOKEN}", body=SECRET)

    assert SECRET not in _messages(raised.value)


# --- the destination's limits -------------------------------------------------------------------


def test_each_attempt_goes_through_the_destinations_call(server: Script) -> None:
    url = server.answer("/guarded", Answer(503), Answer(429, {"Retry-After": "1"}), Answer(200))
    guard = RecordingGuard()

    client().request("PUT", url, ctx=context(guard=guard), destination="webhooks", body=b"{}")

    # Transient failures are raised inside the call, so the destination's breaker counts them.
    assert [destination for destination, _ in guard.calls] == ["webhooks"] * 3
    assert [failure is not None and issubclass(failure, RetryableError) for _, failure in guard.calls] == [
        True,
        True,
        False,
    ]


def test_a_permanent_answer_is_not_a_failure_of_the_destination(server: Script) -> None:
    url = server.answer("/missing", Answer(404))
    guard = RecordingGuard()

    with pytest.raises(PermanentError):
        client().post(url, ctx=context(guard=guard), destination="webhooks", body=b"{}")

    assert guard.calls == [("webhooks", None)]


def test_a_throttled_destination_sends_nothing(server: Script) -> None:
    url = server.answer("/limited", Answer(200))

    with pytest.raises(Throttled):
        client().post(url, ctx=context(guard=RecordingGuard(refuse=True)), destination="webhooks", body=b"{}")

    assert server.requests("/limited") == []


def test_a_destination_without_the_jobs_context_is_refused() -> None:
    with pytest.raises(ValueError, match="ctx"):
        client(pool=RecordingPool()).post("https://api.example/a", destination="webhooks")


# --- the policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"connect_timeout": timedelta(0)}, "connect_timeout must be positive"),
        ({"read_timeout": timedelta(minutes=16)}, "read_timeout must be positive and at most"),
        ({"read_timeout": 10}, "read_timeout must be a timedelta"),
        ({"retries": -1}, "retries must be a whole number"),
        ({"retries": 6}, "retries must be a whole number"),
        ({"retries": True}, "retries must be a whole number"),
        ({"backoff_base": timedelta(seconds=3), "backoff_cap": timedelta(seconds=2)}, "backoff must satisfy"),
        ({"backoff_cap": timedelta(minutes=2)}, "backoff must satisfy"),
        ({"max_retry_after": timedelta(minutes=5)}, "max_retry_after must be from 0"),
    ],
)
def test_a_bad_policy_is_refused_in_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DeclarationError, match=message) as raised:
        HttpPolicy(**options)

    assert str(raised.value).startswith("HttpPolicy: ")
    assert "\n" not in str(raised.value)


# --- the webhook job on its fake receiver -------------------------------------------------------


def _deliver(url: str, event_id: str, guard: RecordingGuard | None = None) -> None:
    deliver_webhook(Webhook(url=url, event_id=event_id, body=SECRET), context(guard=guard))


@pytest.fixture
def effects(aws: Aws) -> EffectsLedger:
    return EffectsLedger(client=aws.dynamodb)


def test_a_webhook_delivery_is_one_call_of_the_webhooks_destination(effects: EffectsLedger) -> None:
    guard = RecordingGuard()
    url = "https://hooks.example/accepts"

    _deliver(url, "evt-ok", guard)

    assert guard.calls == [("webhooks", None)]
    assert effects.get(effect_key(url, "evt-ok")) == Effect(calls=1, applied=1)


def test_a_receiver_answering_429_with_retry_after_hands_the_wait_to_the_queue(effects: EffectsLedger) -> None:
    url = "https://hooks.example/retry-after/30"

    with pytest.raises(RetryableError, match="429") as raised:
        _deliver(url, "evt-busy")

    assert raised.value.retry_after == timedelta(seconds=30)
    assert effects.get(effect_key(url, "evt-busy")) == Effect(calls=1, applied=0)


def test_a_flaky_receiver_is_retried_by_the_queue_not_in_process(effects: EffectsLedger) -> None:
    url = "https://hooks.example/flaky-1/x"

    with pytest.raises(RetryableError, match="503"):
        _deliver(url, "evt-flaky")
    assert effects.get(effect_key(url, "evt-flaky")) == Effect(calls=1, applied=0)

    _deliver(url, "evt-flaky")  # the queue's next attempt
    assert effects.get(effect_key(url, "evt-flaky")) == Effect(calls=2, applied=1)


def test_a_receiver_answering_404_dead_letters_the_delivery(effects: EffectsLedger) -> None:
    url = "https://hooks.example/status/404"

    with pytest.raises(PermanentError, match="404 Not Found") as raised:
        _deliver(url, "evt-gone")

    assert SECRET not in _messages(raised.value)
    assert effects.get(effect_key(url, "evt-gone")) == Effect(calls=1, applied=0)
