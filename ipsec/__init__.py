"""IPsec: algorithms, profiles, SA/policy specs and plans, XFRM netlink messages, the overhead model."""
from ipsec import _pyroute2

_pyroute2.install()  # before any pyroute2 import of the project's: see ipsec/_pyroute2.py
