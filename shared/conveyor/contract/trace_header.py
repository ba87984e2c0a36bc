"""The X-Ray trace header a producer's message carries, so the worker can name the producer's trace.

Plain environment reading, no tracer: the SDK imports it without loading the X-Ray SDK.
"""

import os

# Set by Lambda (and X-Ray-instrumented processes) to the current trace header.
TRACE_ENV = "_X_AMZN_TRACE_ID"
SYSTEM_ATTRIBUTE = "AWSTraceHeader"


def current_trace_header() -> str | None:
    return os.environ.get(TRACE_ENV) or None


def trace_id(header: str | None) -> str | None:
    """``Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`` -> the Root."""
    if not header:
        return None
    fields = dict(part.split("=", 1) for part in header.split(";") if "=" in part)
    return fields.get("Root")
