"""What every command prints with."""
from __future__ import annotations

import sys


def console():
    """A rich console; when the output is not a terminal (a pipe, a CI log), wide enough for our tables."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)
