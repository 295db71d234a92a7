"""Benchmark commands: ``python -m rbd_deriv.bench <subcommand> [options]``.

Each subcommand is a module with ``main(argv: Sequence[str] | None) -> int``. Registering a new one is one
line in :data:`SUBCOMMANDS`; modules are imported only when their subcommand runs, so a benchmark that
needs rclpy does not make the others need it.
"""

from __future__ import annotations

from typing import Dict

__all__ = ["SUBCOMMANDS"]

SUBCOMMANDS: Dict[str, str] = {
    "core": "rbd_deriv.bench.core",
    "latency": "rbd_deriv.bench.latency",
    "mpc": "rbd_deriv.bench.mpc",
    "bag-eval": "rbd_deriv.bench.bag_eval",
    "bag-play": "rbd_deriv.bench.bag_play",
    "fleet": "rbd_deriv.bench.fleet",
    "startup": "rbd_deriv.bench.startup",
    "soak": "rbd_deriv.bench.soak",
    "loaded-loop": "rbd_deriv.bench.loaded_loop",
    "contact": "rbd_deriv.bench.contact",
    "legged": "rbd_deriv.bench.legged",
    "load": "rbd_deriv.bench.load",
}
"""Subcommand name -> module path (the module defines ``main(argv)``)."""
