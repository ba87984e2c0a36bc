"""The public JSON Schema of every message Conveyor sends, generated from the declarations.

One document: the envelope, plus, for each job type and supported version, the payload
schema that ``data`` must match when ``type`` and ``v`` say so, and (``x-conveyor``) where each
job type is sent. Producers in other repositories and languages validate against it;
`conveyor schema` writes it to docs/.
"""

from typing import Any

from conveyor.contract.envelope import Envelope
from conveyor.contract.topology import Topology

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Where the document says which queue each job type goes to: what a producer without the
# project's code needs to send it (conveyor.sdk.schema_catalog). Validators ignore the keyword.
ROUTES_KEY = "x-conveyor"


def envelope_schema(topology: Topology) -> dict[str, Any]:
    schema = Envelope.model_json_schema()
    definitions: dict[str, Any] = schema.pop("$defs", {})
    rules = []
    for job_type in topology.job_types:
        payload = job_type.model.model_json_schema(ref_template=f"#/$defs/{job_type.name}.{{model}}")
        for name, nested in payload.pop("$defs", {}).items():
            definitions[f"{job_type.name}.{name}"] = nested
        current = f"{job_type.name}.v{job_type.version}"
        definitions[current] = payload
        rules.append(
            {
                "if": {
                    "properties": {"type": {"const": job_type.name}, "v": {"const": job_type.version}},
                    "required": ["type", "v"],
                },
                "then": {"properties": {"data": {"$ref": f"#/$defs/{current}"}}},
            }
        )
    schema.pop("title", None)
    schema.pop("description", None)  # the model's docstring: the document says it its own way below
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "Conveyor job envelope",
        "description": (
            "The JSON body of every Conveyor message. Unknown top-level fields are ignored. "
            "`data` must match the payload schema of its `type` at version `v`."
        ),
        **schema,
        "properties": {**schema["properties"], "type": {"enum": [j.name for j in topology.job_types]}},
        "allOf": rules,
        "$defs": dict(sorted(definitions.items())),
        ROUTES_KEY: routes(topology),
    }


def routes(topology: Topology) -> dict[str, Any]:
    """Each queue's kind and each job type's queue, current version, size limit and dedupe window."""
    return {
        "queues": {queue.name: {"fifo": queue.fifo} for queue in topology.queues},
        "job_types": {
            job_type.name: {
                "queue": job_type.queue,
                "version": job_type.version,
                "max_payload_bytes": job_type.max_payload_bytes,
                "dedupe_window_s": int(job_type.dedupe_window.total_seconds()),
            }
            for job_type in topology.job_types
        },
    }
