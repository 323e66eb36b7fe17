"""The ipsec-testbed command and what it stands on: kernel probe, User-Mode Linux, namespaces, clean-up."""
from ipsec import _pyroute2

_pyroute2.install()  # before any pyroute2 import of the project's: see ipsec/_pyroute2.py
