"""Lambda contexts for tests: the local runtime's own, typed as handlers expect."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from conveyor.local.lambda_context import LocalLambdaContext


def lambda_context(**overrides: Any) -> LambdaContext:
    return LocalLambdaContext(**overrides).as_lambda_context()
