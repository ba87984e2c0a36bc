#!/usr/bin/env python3
"""CDK entry point: `cdk synth`, `cdk diff` and `cdk deploy` run this (see cdk.json).

A declaration that cannot be deployed, or a cdk-nag finding nobody acknowledged, ends
the synth with one line on stderr and exit status 1.
"""

import sys

from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import load_topology, topology_spec


def main() -> None:
    try:
        spec = topology_spec()
        topology = load_topology(spec)
    except DeclarationError as error:
        sys.exit(f"conveyor: {error}")
    # Imported only once the declarations are valid: aws_cdk starts a Node.js process.
    from infra.app import build_app, is_validation_failure

    try:
        build_app(topology, topology_spec=spec).synth()
    except DeclarationError as error:
        sys.exit(f"conveyor: {error}")
    except RuntimeError as error:
        if not is_validation_failure(error):
            raise
        sys.exit("conveyor: cdk-nag found unacknowledged errors (listed above; full report in validation-report.json)")


if __name__ == "__main__":
    main()
