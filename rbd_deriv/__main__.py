"""``python -m rbd_deriv <subcommand>``: the package's command line."""

from __future__ import annotations

import sys

from rbd_deriv.cli import dispatch

SUBCOMMANDS = {
    "demo": "rbd_deriv.demo.__main__",
    "bench": "rbd_deriv.bench.__main__",
    "bag-eval": "rbd_deriv.replay.cli",
    "fleet-eval": "rbd_deriv.replay.fleet_cli",
    "bag-play": "rbd_deriv.replay.live",
}

if __name__ == "__main__":
    sys.exit(dispatch("python -m rbd_deriv", SUBCOMMANDS))
