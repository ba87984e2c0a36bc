"""Why a job was dead-lettered or retried: a fixed vocabulary that ops tools and alarms key on."""

from enum import StrEnum


class Reason(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_ENVELOPE = "invalid_envelope"
    UNKNOWN_TYPE = "unknown_type"
    UNSUPPORTED_VERSION = "unsupported_version"
    INVALID_PAYLOAD = "invalid_payload"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    PERMANENT_ERROR = "permanent_error"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    DEADLINE_EXCEEDED = "deadline_exceeded"
