"""What the tests of the shared limits share: a clock moved by hand, request counts, and the rate bound itself."""

from collections import Counter
from datetime import timedelta
from typing import Any

from conveyor.contract.destinations import RateLimit

# A multiple of every budget window, so a test's first minutes stay in one window bucket.
NOW = 1_800_000_000.0


class Clock:
    """Epoch seconds that move only when told."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def counted(client: Any) -> Counter[str]:
    """The DynamoDB operations ``client`` calls from now on, by name."""
    calls: Counter[str] = Counter()
    client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.update([model.name]))
    return calls


def sent(client: Any) -> list[dict[str, Any]]:
    """The parameters of every UpdateItem ``client`` sends from now on."""
    requests: list[dict[str, Any]] = []
    client.meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", lambda params, **_: requests.append(params)
    )
    return requests


def within_bound(uses: list[float], limit: RateLimit) -> bool:
    """Over every window between two uses, at most rate * W / per + burst of them (in whole microseconds)."""
    micros = sorted(round(use * 1_000_000) for use in uses)
    per = limit.per // timedelta(microseconds=1)
    return all(
        (j - i + 1) * per <= limit.rate * (micros[j] - micros[i]) + limit.burst * per
        for i in range(len(micros))
        for j in range(i, len(micros))
    )
