"""Strict mode: the embedded AWS refuses what AWS refuses, so a local green means an AWS green.

moto accepts requests AWS rejects (an eleventh message attribute, a 401 KB item, a 26-item
BatchWriteItem). Strict mode checks each request against AWS's documented limits before moto
sees it, and answers a violation with AWS's error code, message shape and the page that states
the limit. The same rules run in two places:

- ``StrictGateway`` (conveyor.local.gateway, server side), in front of the embedded AWS's moto server: on for the
  local runtime, the demo and every test that starts a server;
- ``install()`` (client side), botocore hooks for in-process moto (``mock_aws``) in tests.

The limits themselves live in conveyor.contract.limits, shared with the SDK, the harness and infra.
"""

from conveyor.local.strict.client import install, suspended
from conveyor.local.strict.rules import RULES, check, refused
from conveyor.local.strict.violation import Violation

__all__ = ["RULES", "Violation", "check", "install", "refused", "suspended"]
