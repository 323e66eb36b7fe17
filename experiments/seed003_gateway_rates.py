#!/usr/bin/env python3
"""``ipsec-testbed reproduce 003``, as a script (``--help`` says what the seed measured and what this does)."""
import sys

import _bootstrap  # noqa: F401  (the project's packages and virtualenv, with any Python)
from cli.reproduce import main

if __name__ == "__main__":
    sys.exit(main(["003", *sys.argv[1:]]))
