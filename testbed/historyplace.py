"""Where the results history lives: ``--history``, else ``$IPSEC_TESTBED_HISTORY``, else the user's own file.

A path names an SQLite file, a ``postgresql://`` URL a team's server, and ``off`` no history at all
(:mod:`analysis.store` opens them).  Light on purpose: every command's ``--help`` names the default.
"""
from __future__ import annotations

import os

#: Where the history goes unless --history names another (a path or a postgresql:// URL), or ``off``.
ENV = "IPSEC_TESTBED_HISTORY"
OFF = "off"


def default_path() -> str:
    """The user's own store: ``$XDG_DATA_HOME/ipsec-testbed/history.sqlite`` (``~/.local/share/...``)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "ipsec-testbed", "history.sqlite")


def location(history: str | None) -> str | None:
    """Where rows go: ``history`` (a path or URL), else ``$IPSEC_TESTBED_HISTORY``, else :func:`default_path`;
    None when it is ``off``."""
    where = history or os.environ.get(ENV) or default_path()
    return None if where == OFF else where


def is_url(where: str) -> bool:
    return where.startswith(("postgresql://", "postgres://"))


def describe(where: str) -> str:
    """``where`` without a password."""
    if not is_url(where):
        return where
    scheme, _, rest = where.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{scheme}://{userinfo}{at}{host}"
