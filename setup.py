"""IPsec Testbed: reproduce published IPsec performance experiments on one Linux machine.

The metadata is in pyproject.toml; this file stays for tools that look for it.
"""
from setuptools import setup

setup()
