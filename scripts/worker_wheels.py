"""Download the worker requirements' wheels for the function's platform into the wheelhouse synth reads.

``make setup`` runs this, at install time, when the network is there; every synth after it
installs from the wheelhouse alone (infra/worker_package.py). A requirement with no wheel for the
function's Python and architecture ends it with one line on stderr and exit status 1.
"""

import sys

from conveyor.contract.errors import DeclarationError
from infra import lambda_wheels, worker_package


def main() -> None:
    try:
        lambda_wheels.download(worker_package.worker_requirements(), worker_package.WHEELHOUSE, worker_package.PLATFORM)
    except DeclarationError as error:
        sys.exit(f"conveyor: {error}")


if __name__ == "__main__":
    main()
