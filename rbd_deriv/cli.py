"""Subcommand dispatch shared by ``python -m rbd_deriv`` and ``python -m rbd_deriv.bench``.

A subcommand is a module defining ``main(argv) -> int``; it is imported only when it runs, so a command that
needs rclpy or matplotlib does not make the others need them.
"""

from __future__ import annotations

import importlib
import sys
from typing import Mapping, Optional, Sequence


def dispatch(prog: str, subcommands: Mapping[str, str], argv: Optional[Sequence[str]] = None) -> int:
    """Run the subcommand named by ``argv[0]`` with the remaining arguments; return its exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    usage = f"usage: {prog} {{{','.join(subcommands)}}} [options]  (add --help after a subcommand for its options)"
    if not arguments:
        print(usage, file=sys.stderr)
        return 2
    if arguments[0] in ("-h", "--help"):
        print(usage)
        return 0
    name, rest = arguments[0], arguments[1:]
    if name not in subcommands:
        print(f"unknown subcommand {name!r}\n{usage}", file=sys.stderr)
        return 2
    module = importlib.import_module(subcommands[name])
    return int(module.main(rest) or 0)
