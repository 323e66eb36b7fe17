#!/usr/bin/env python3
"""``ipsec-testbed sweep``, as a script: the packet-size sweep (``--help`` says what it measures).

Kept because users and the design card run it by this name: ``sudo python3
experiments/packet_size_sweep.py`` is ``sudo ipsec-testbed sweep``, with any Python.
"""
import sys

import _bootstrap  # noqa: F401  (the project's packages and virtualenv, with any Python)
from cli.sweep import main

if __name__ == "__main__":
    sys.exit(main())
