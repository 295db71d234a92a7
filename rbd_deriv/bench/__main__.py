"""Dispatch ``python -m rbd_deriv.bench <subcommand> ...`` to the module registered in SUBCOMMANDS."""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from rbd_deriv.bench import SUBCOMMANDS
from rbd_deriv.cli import dispatch


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark named by ``argv[0]`` with the remaining arguments; return its exit code."""
    return dispatch("python -m rbd_deriv.bench", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
