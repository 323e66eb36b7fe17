"""The rule for deferring an import, checked on every module of the project.

An import goes at the top of its module.  It may be deferred into the function that needs it
for one of two reasons only:

1. **Start-up time.**  The module is slow to import: a heavy third-party package (:data:`HEAVY`:
   plotting, terminal rendering, packet dissection, netlink, Mininet, numpy), a slow part of the
   standard library (:data:`SLOW`), or a module of the project that imports one at its top.  Every
   job starts again inside User-Mode Linux, where importing plotly alone takes seconds, and
   ``--help`` should answer at once; so the heavy parts are imported where they are used.  For
   the same reason the front door (``cli/``) imports the project's modules a job works with only
   when that job runs: ``ipsec-testbed`` builds every job's parser for every command, so the
   modules it loads for that stay few (:data:`FRONT_DOOR`).
2. **An optional dependency**, not installed everywhere (:data:`OPTIONAL`).

Anything else (the standard library, a light module of the project) is imported at the top,
where a reader sees what the module depends on.  ``testbed/_pyroute2.py`` says how pyroute2
itself is imported lighter still.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("testbed", "ipsec", "topologies", "analysis", "experiments", "cli")
#: Third-party packages slow enough to import that a module may defer them.
HEAVY = frozenset({"plotly", "rich", "numpy", "scapy", "pyroute2", "mininet", "cryptography",
                   # the history's: 25 ms (jumpavg), 70-120 ms (psycopg, kcidb_io and its jsonschema)
                   "jumpavg", "psycopg", "kcidb_io", "jsonschema"})
#: Standard-library modules slow enough to defer (importlib.metadata reads every installed
#: distribution's metadata: 12-18 ms on the host).
SLOW = frozenset({"importlib.metadata"})
#: The front door's package: it may defer any module of the project (not the standard library).
FRONT_DOOR = "cli"
#: Packages the project can run without.
OPTIONAL = frozenset({"yaml"})


def _path(module: str) -> Path | None:
    for candidate in (REPO / (module.replace(".", "/") + ".py"), REPO / module.replace(".", "/") / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imported(node: ast.AST) -> list[str]:
    """The modules an import statement imports (``from a import b`` imports ``a.b`` when that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names if _path(f"{node.module}.{a.name}"))]
    return []


@functools.cache
def _top_level_imports(module: str) -> tuple[str, ...]:
    path = _path(module)
    if path is None:
        return ()
    found: list[str] = []
    for statement in ast.parse(path.read_text()).body:
        for node in ast.walk(statement) if isinstance(statement, (ast.If, ast.Try)) else (statement,):
            found += _imported(node)
    return tuple(found)


def heavy(module: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether importing ``module`` imports a :data:`HEAVY` package (its parents' imports included)."""
    if module in seen:
        return False
    seen = seen | {module}
    top = module.split(".")[0]
    if top in HEAVY or module in SLOW:
        return True
    if top not in LAYERS:
        return False
    parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
    return any(heavy(m, seen) for m in (*parents, *_top_level_imports(module)))


def deferred_without_reason(path: Path) -> list[str]:
    """Imports inside functions of ``path`` that the rule does not allow."""
    found = []
    front_door = path.relative_to(REPO).parts[0] == FRONT_DOOR
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            names = _imported(node)
            if names and not any(heavy(n) or n.split(".")[0] in OPTIONAL or (front_door and n.split(".")[0] in LAYERS)
                                 for n in names):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {names[0]} (in {function.name})")
    return found


def modules() -> list[Path]:
    return [p for layer in LAYERS for p in sorted((REPO / layer).rglob("*.py"))]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_are_deferred_only_for_start_up_time_or_an_optional_dependency(path):
    found = deferred_without_reason(path)
    assert not found, "import these at the top of the module (see this test's docstring):\n" + "\n".join(found)


def test_the_rule_tells_a_heavy_import_from_a_light_one(tmp_path, monkeypatch):
    assert heavy("rich.table") and heavy("analysis.figures") and not heavy("json") and not heavy("testbed.names")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    import json\n    from rich.table import Table\n"
                      "    import yaml\n    return json, Table, yaml\n")
    assert [f.split(":")[1] for f in deferred_without_reason(sample)] == ["2"]
