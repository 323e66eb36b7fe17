"""The platform the testbed stands on: names, namespaces, kernel backends, run directories, errors.

The bottom layer: it imports no other package of the project.
"""
from testbed import _pyroute2

_pyroute2.install()  # before any pyroute2 import of the project's: see testbed/_pyroute2.py
