"""A Lambda context with the attributes and methods the runtime provides."""

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from aws_lambda_powertools.utilities.typing import LambdaContext


@dataclass
class FakeLambdaContext:
    function_name: str = "conveyor-worker"
    memory_limit_in_mb: int = 256
    timeout_s: float = 30.0
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/conveyor-worker"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_s - (time.monotonic() - self._started)) * 1000))


def lambda_context(**overrides: Any) -> LambdaContext:
    """A context typed as Powertools' LambdaContext, which handlers are annotated with."""
    return cast(LambdaContext, FakeLambdaContext(**overrides))
