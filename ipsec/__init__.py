"""IPsec: algorithms, profiles, SA/policy specs and plans, XFRM netlink messages, the overhead model."""
import testbed  # noqa: F401  (installs the light pyroute2 import first: see testbed/_pyroute2.py)
