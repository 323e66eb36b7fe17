"""Import pyroute2's submodules without running its package ``__init__`` (which imports all of it).

``import pyroute2`` imports every protocol pyroute2 knows (IPDB, NDB, conntrack, nl80211,
ipvs, wireguard, ...): 1.8 s inside User-Mode Linux, where the testbed needs only the
netlink core, rtnetlink's traffic control and ``netns``.  :func:`install` registers the
package with its submodule path but without executing ``__init__``; the testbed imports
the submodules it uses (``pyroute2.netlink...``, ``pyroute2.iproute.linux``,
``pyroute2.netns``) and saves 0.7 s of every run in a guest.  Any other code in the
process that asks the package for a name (``pyroute2.IPRoute``, ``from pyroute2 import
NDB``) gets it: the first such access runs the real ``__init__``.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import sys


def install() -> None:
    """Register the light ``pyroute2`` package, unless pyroute2 is imported already (then: nothing)."""
    if "pyroute2" in sys.modules:
        return
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return  # not installed, or not a package: the normal import reports it
    package = importlib.util.module_from_spec(spec)
    state = {"loaded": False}

    def complete(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if importlib.util.find_spec(f"pyroute2.{name}") is not None:
            return importlib.import_module(f"pyroute2.{name}")  # a submodule: stay light
        if not state["loaded"]:
            state["loaded"] = True
            del package.__dict__["__getattr__"]
            spec.loader.exec_module(package)  # the real __init__, once
            return getattr(package, name)
        raise AttributeError(f"module 'pyroute2' has no attribute {name!r}")

    package.__getattr__ = complete
    sys.modules["pyroute2"] = package


def preload_libc() -> None:
    """Give ``pyroute2.netns`` the C library by its soname.

    pyroute2 finds it with ``ctypes.util.find_library("c")``, which runs ``ldconfig -p``
    (a process: 0.1 s inside User-Mode Linux) the first time a namespace is entered.
    """
    from pyroute2 import netns

    if netns.__dict__.get("__libc") is None:
        with contextlib.suppress(OSError):  # not glibc: pyroute2 finds it its own way
            netns.__dict__["__libc"] = ctypes.CDLL("libc.so.6", use_errno=True)
