#!/usr/bin/env python3
"""``ipsec-testbed reproduce 000``, as a script (``--help`` says what the seed measured and what this does)."""
import sys

import _bootstrap  # noqa: F401  (the project's packages and virtualenv, with any Python)
from cli.reproduce import main

if __name__ == "__main__":
    sys.exit(main(["000", *sys.argv[1:]]))
