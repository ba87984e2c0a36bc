"""A Lambda context for local invocations: the attributes Lambda provides, and a real deadline."""

import time
import uuid
from dataclasses import dataclass, field
from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

MILLISECONDS = 1000


@dataclass
class LocalLambdaContext:
    function_name: str = "conveyor-worker"
    memory_limit_in_mb: int = 256
    timeout_s: float = 30.0
    region: str = "us-east-1"
    account: str = "000000000000"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_s - (time.monotonic() - self._started)) * MILLISECONDS))

    def as_lambda_context(self) -> LambdaContext:
        """Typed as Powertools' LambdaContext, which handlers are annotated with."""
        return cast(LambdaContext, self)
