"""Fault injection by input, like a provider's test mode: the input names the fault.

``flaky-<n>`` anywhere in an identifier makes the first ``n`` calls for that effect fail
with a transient error, so the job succeeds after backoff.
"""

import re

_FLAKY = re.compile(r"flaky-(\d+)")


def transient_failures_for(identifier: str) -> int:
    match = _FLAKY.search(identifier)
    return int(match.group(1)) if match else 0
