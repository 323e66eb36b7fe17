"""The packages import one way, and only the backends know a backend by its name.

::

    testbed (platform: names, namespaces, errors, backends, run directories, options)
      <- ipsec <- topologies <- analysis <- experiments <- cli

A module may import its own package and the packages below it, never one above.  The walk
reads every module's source (``ast``), deferred imports inside functions included, so an
import against the layers fails here however it is written.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from testbed.record import FIELDS, Meta, MetaPart, MetaRun, MetaScale, MetaSweep, MetaVersions

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("testbed", "ipsec", "topologies", "analysis", "experiments", "cli")
#: Entry-point scripts import from any layer; they are programs, not library modules.
SCRIPTS = ("benchmarks",)
#: Scripts kept for users who run them by name: each is ``ipsec-testbed JOB`` and nothing else.
SHIMS = ("experiments/packet_size_sweep.py", "experiments/seed000_x230_gigabit.py",
         "experiments/seed001_netio_3des_ah.py", "experiments/seed002_ttcp_topologies.py",
         "experiments/seed003_gateway_rates.py", "experiments/seed004_ipv6_clients.py")


def modules() -> list[Path]:
    found = []
    for layer in LAYERS:
        found += sorted(p for p in (REPO / layer).rglob("*.py") if str(p.relative_to(REPO)) not in SHIMS)
    return found


def modules_and_scripts() -> list[Path]:
    """The layers' modules and the benchmarks."""
    return modules() + sorted((REPO / "benchmarks").glob("*.py"))


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every import of one of the project's packages in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in LAYERS:
                found.append((node.lineno, top))
    return found


def violations(path: Path) -> list[str]:
    layer = path.relative_to(REPO).parts[0]
    rank = LAYERS.index(layer)
    return [f"{path.relative_to(REPO)}:{line} imports {top} (layer {LAYERS.index(top)} above {layer}'s {rank})"
            for line, top in project_imports(path) if LAYERS.index(top) > rank]


def test_every_layer_has_modules():
    assert {p.relative_to(REPO).parts[0] for p in modules()} == set(LAYERS)


def test_packages_import_only_their_own_layer_and_those_below():
    bad = [v for path in modules() for v in violations(path)]
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_check_fails_on_an_import_against_the_layers(tmp_path, monkeypatch):
    # the same walk, on a copy of a platform module with one upward import added back
    module = REPO / "testbed" / "rundir.py"
    fake_repo = tmp_path / "repo"
    (fake_repo / "testbed").mkdir(parents=True)
    (fake_repo / "testbed" / "rundir.py").write_text(module.read_text() + "\n\ndef _late():\n"
                                                     "    from experiments.engine.sweep import run_sweep  # noqa\n")
    monkeypatch.setattr(__import__(__name__), "REPO", fake_repo)
    found = violations(fake_repo / "testbed" / "rundir.py")
    assert len(found) == 1 and "imports experiments" in found[0]


BACKEND_NAMES = ("host", "uml")


def backend_name_comparisons(path: Path) -> list[str]:
    """Comparisons of a backend's name (``x == "uml"``, ``kernel in ("host", "uml")``, ``meta["backend"] == ...``).

    A comparison counts when one side is a string that names a backend and the other side is
    about a backend or kernel (a name, attribute or key with "backend" or "kernel" in it):
    ``node.role == "host"`` (a topology's host node) does not.
    """
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        strings = {c.value for p in parts for c in ast.walk(p)
                   if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if not strings & set(BACKEND_NAMES):
            continue
        about = [p for p in parts if not (isinstance(p, (ast.Constant, ast.Tuple, ast.List, ast.Set)))]
        text = " ".join(ast.get_source_segment(source, p) or "" for p in about).lower()
        if "backend" in text or "kernel" in text:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


@pytest.mark.parametrize("path", [p for p in modules() if "backends" not in p.parts],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_outside_the_backends_compares_a_backends_name(path):
    found = backend_name_comparisons(path)
    assert not found, "ask the backend what it can do instead:\n" + "\n".join(found)


def test_the_name_check_finds_the_comparisons_it_is_for(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text('a = meta.get("backend") == "uml"\nb = kernel in ("host", "uml")\n'
                      'c = node.role == "host"\nd = choice.name != "host"\n')
    assert [f.split(":")[1] for f in backend_name_comparisons(sample)] == ["1", "2"]


def test_benchmarks_sit_on_top_and_the_command_line_loads_them_only_by_name():
    """A benchmark may use every package below the command line; the command line loads a benchmark by its name
    (``bench NAME``, a guest's job), never by an import, so that no package below depends on a script."""
    for path in sorted(p for d in SCRIPTS for p in (REPO / d).glob("*.py")):
        assert "_bootstrap" not in path.read_text(), f"{path}: a benchmark runs through `ipsec-testbed bench`"
    for path in sorted((REPO / "cli").rglob("*.py")):
        assert "benchmarks" not in {top for _, top in project_imports(path)}, f"{path}: imports a benchmark"


def test_nothing_below_the_command_line_imports_it():
    """The command line makes objects (a Job, a SweepSpec, a benchmark's Options) and hands them down: nothing
    outside cli/ (its shims aside) imports it, to parse words into one or to borrow its option types."""
    found = []
    for path in modules_and_scripts():
        if path.relative_to(REPO).parts[0] == "cli" or str(path.relative_to(REPO)) in SHIMS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if any(n == "cli" or n.startswith("cli.") for n in names):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "take typed arguments (experiments.engine.plan.default_sweep, experiments.benchmark):\n" + \
        "\n".join(found)


def test_one_atomic_write():
    """Files are replaced in one place (testbed.rundir.atomic_write: written beside, fsynced, renamed over,
    the directory synced); a second, hand-written write-then-rename would skip a step."""
    found = []
    for path in modules_and_scripts():
        tree = ast.parse(path.read_text())
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] + [tree]:
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("replace", "rename") and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == "os":
                    found.append((str(path.relative_to(REPO)), getattr(function, "name", "<module>")))
    assert {f for f in found if f[1] != "<module>"} == {("testbed/rundir.py", "atomic_write"),
                                                        ("testbed/rundir.py", "publish_directory")}, found


def test_the_shims_only_hand_their_arguments_to_the_front_door():
    for shim in SHIMS:
        tree = ast.parse((REPO / shim).read_text())
        imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert imported <= {("cli.sweep", "main"), ("cli.reproduce", "main")}, (shim, imported)
        assert sum(isinstance(n, ast.FunctionDef) for n in ast.walk(tree)) == 0, f"{shim}: a shim defines nothing"


def script_names() -> set[str]:
    """The file names of the project's runnable scripts (experiments/*.py, benchmarks/*.py, cli/*.py)."""
    return {p.name for d in ("experiments", "benchmarks", "cli") for p in (REPO / d).glob("*.py")
            if not p.name.startswith("_")}


def scripts_run_by_path(path: Path, names: set[str]) -> list[str]:
    """String constants outside docstrings and help texts that name one of the project's scripts (a file
    name such as ``"packet_size_sweep.py"``, alone or at the end of a path): a command built to run it."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and " " not in node.value and node.value.rsplit("/", 1)[-1] in names:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    return found


def test_no_project_module_runs_another_projects_script_by_path():
    """Jobs call each other in process or through the front door (``python -m cli JOB``), never by a path."""
    names = script_names()
    found = [f for path in modules_and_scripts() for f in
             scripts_run_by_path(path, names)]
    assert not found, "run the job through `ipsec-testbed`, not by its path:\n" + "\n".join(found)


def test_the_path_check_finds_a_script_named_in_a_command(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text('"""Runs packet_size_sweep.py."""\n'
                      'cmd = [sys.executable, os.path.join(REPO, "experiments", "packet_size_sweep.py")]\n'
                      'help = "see experiments/packet_size_sweep.py --help"\n')
    assert [f.split(":")[1] for f in scripts_run_by_path(sample, {"packet_size_sweep.py"})] == ["2"]


BOUND_NAMES = ("link", "cpu", "other", "anomaly")
RECORD_MODULE = "testbed/record.py"


def bound_literals(path: Path) -> list[str]:
    """Places that spell a bound class as a string (testbed.record.Bound says them once):

    a comparison of something about a bound (``r.get("bound") != "anomaly"``, ``a.bound == "cpu"``),
    a tuple, list or set of bound names, a dict keyed by them, or a ``return "link", why``.
    """
    source = path.read_text()
    names = set(BOUND_NAMES)
    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            strings = {c.value for p in parts for c in ast.walk(p) if isinstance(c, ast.Constant)}
            about = " ".join(ast.get_source_segment(source, p) or "" for p in parts
                             if not isinstance(p, ast.Constant)).lower()
            hit = bool(strings & names) and "bound" in about
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hit = len(node.elts) > 1 and all(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
        elif isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            hit = bool(keys) and all(isinstance(k, ast.Constant) and k.value in names for k in keys)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
            first = node.value.elts[0]
            hit = isinstance(first, ast.Constant) and first.value in names
        if hit:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.get_source_segment(source, node)[:80]}")
    return found


def test_only_the_record_module_spells_the_bound_classes():
    found = [f for path in modules_and_scripts()
             if str(path.relative_to(REPO)) != RECORD_MODULE for f in bound_literals(path)]
    assert not found, "use testbed.record.Bound:\n" + "\n".join(found)


def test_the_bound_check_finds_what_it_is_for(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text('a = [r for r in rs if r.get("bound") != "anomaly"]\nb = ("link", "cpu")\n'
                      'c = {"cpu": 1, "other": 2}\ndef f():\n    return "link", "full"\n'
                      'd = fields[0] == "cpu"\ne = agg.bound == Bound.CPU\n')
    assert sorted(f.split(":")[1] for f in bound_literals(sample)) == ["1", "2", "3", "5"]


def test_the_point_and_the_usable_rule_are_defined_once():
    """A point's fields are listed, and a usable record defined, only in testbed.record."""
    point = ("topology", "profile", "mode", "ip_version", "transport", "rate_mbit", "size_bytes")
    found = []
    for path in modules_and_scripts():
        if str(path.relative_to(REPO)) == RECORD_MODULE:
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:  # functions of a module (a Point's own point_key() is its fields, by name)
            if isinstance(node, ast.FunctionDef) and node.name in ("usable", "point_key", "record_key"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: def {node.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and len(node.elts) >= len(point) and \
                    tuple(getattr(e, "value", None) for e in node.elts[:len(point)]) == point:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: the point's fields")
    assert not found, "use testbed.record:\n" + "\n".join(found)


#: Where a string that is also a record field's name reads something that is not a record:
#: (module, the expression read from), each with what it is.
NOT_RECORDS = {
    ("testbed/netns.py", "result"): "a command's reply from inside a namespace",
    ("ipsec/xfrm/messages.py", "self"): "a netlink message",
    ("ipsec/xfrm/messages.py", "msg"): "a netlink message",
    ("ipsec/xfrm/messages.py", 'msg["header"]'): "a netlink message's header",
    ("ipsec/xfrm/state.py", "msg"): "an XFRM netlink message",
    ("ipsec/xfrm/apply.py", 'reply["header"]'): "a netlink error message's header",
    ("ipsec/xfrm/state.py", "tmpl"): "an XFRM policy's template",
    ("topologies/shaping.py", "p"): "a tc operation's parameters",
    ("experiments/engine/iperf.py", "data"): "iperf3's JSON",
    ("experiments/engine/iperf.py", "sent"): "iperf3's JSON: a sender's summary",
    ("experiments/engine/iperf.py", "s"): "iperf3's JSON: a stream's summary",
    ("cli/selftest.py", "case"): "a JUnit XML test case",
    ("experiments/runner.py", "counts"): "a sweep's count of its points (experiments.engine.sweep.run_sweep)",
    ("experiments/reproduce.py", "counts"): "a part's count of its points",
    ("benchmarks/bound_crosscheck.py", "q"): "a qdisc in tc's JSON",
    ("benchmarks/ike_rekey.py", 'data["end"]["sum_sent"]'): "iperf3's JSON: the sender's summary",
}


def record_key_reads(path: Path) -> list[str]:
    """Places that read a result record's field by its name written out as a string
    (``r["goodput_mbps"]``, ``r.get("bound")``, ``"speed_factor" in r``): records are read by
    attribute (``r.goodput_mbps``), and a field chosen by name is named through
    ``testbed.record.FIELD``, so a renamed field fails where it is used.  :data:`NOT_RECORDS` are
    other things, not records (meta.json, whose fields share some names with a record's, is read by
    attribute too: :func:`meta_key_reads`)."""
    source = path.read_text()
    where = str(path.relative_to(REPO))
    found = []

    def hit(node: ast.AST, key: ast.AST, read_from: ast.AST) -> None:
        if not (isinstance(key, ast.Constant) and key.value in FIELDS):
            return
        text = ast.get_source_segment(source, read_from) or ""
        if (where, text) in NOT_RECORDS:
            return
        found.append(f"{where}:{node.lineno}: {ast.get_source_segment(source, node)[:80]}")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            hit(node, node.slice, node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
              and node.func.attr in ("get", "pop", "setdefault")):
            hit(node, node.args[0], node.func.value)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            hit(node, node.left, node.comparators[0])
    return found


def test_only_the_record_module_reads_records_by_key():
    found = [f for path in modules_and_scripts()
             if str(path.relative_to(REPO)) != RECORD_MODULE for f in record_key_reads(path)]
    assert not found, "read a record by attribute, a field chosen by name through testbed.record.FIELD:\n" + \
        "\n".join(found)


def test_the_record_key_check_finds_what_it_is_for(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text('a = r["goodput_mbps"]\nb = r.get("bound")\nc = "speed_factor" in r\n'
                      'd = meta.get("backend")\ne = r.goodput_mbps\nf = r[FIELD.bound]\ng = x["kind"]\n')
    assert [f.split(":")[1] for f in record_key_reads(sample)] == ["1", "2", "3", "4"]


#: Every name meta.json's objects have (testbed.record.Meta and the objects in it).
META_FIELDS = frozenset(f.name for kind in (Meta, MetaPart, MetaRun, MetaScale, MetaSweep, MetaVersions)
                        for f in kind.known())


def _mentions_meta(text: str) -> bool:
    """Whether an expression's source is about meta.json (``meta``, ``load_meta(d)``, ``run_meta``; not a
    dataclass field's ``metadata``)."""
    return "meta" in text.lower().replace("metadata", "")


def meta_key_reads(path: Path) -> list[str]:
    """Places that read or write a field of meta.json by its name written out as a string
    (``meta["seed"]``, ``meta.get("backend")``, ``"parts" in meta``, ``meta["schema"] = 2``), also
    through a name bound to something read from it (``last = meta.get("runs")[-1]``, then
    ``last.get("points_missing")``; ``for part in meta["parts"]``, then ``part["name"]``).  meta.json
    is read by attribute (testbed.record.Meta); a field chosen by name is named through
    ``testbed.record.META_FIELD``."""
    source = path.read_text()
    tree = ast.parse(source)
    where = str(path.relative_to(REPO))

    def text(node: ast.AST) -> str:
        return ast.get_source_segment(source, node) or ""

    bindings: list[tuple[list[str], ast.AST]] = []  # (names bound, what they are bound to)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bindings.append(([n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)], node.value))
        elif isinstance(node, (ast.For, ast.comprehension)):
            bindings.append(([n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)], node.iter))
    tainted: set[str] = set()

    def meta_valued(node: ast.AST) -> bool:
        """Whether ``node`` is meta.json or a part of it: a name about meta or bound to it, what is read
        from one, or what a function about meta returns (``load_meta(d)``)."""
        if isinstance(node, ast.Name):
            return _mentions_meta(node.id) or node.id in tainted
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return meta_valued(node.value)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault"):
                return meta_valued(node.func.value)
            return _mentions_meta(node.func.attr if isinstance(node.func, ast.Attribute) else text(node.func))
        if isinstance(node, ast.BoolOp):
            return any(meta_valued(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return meta_valued(node.body) or meta_valued(node.orelse)
        return False

    grew = True
    while grew:  # names bound to meta.json or a part of it, to a fixpoint
        grew = False
        for names, value in bindings:
            if set(names) - tainted and meta_valued(value):
                tainted |= set(names)
                grew = True

    found = []

    def hit(node: ast.AST, key: ast.AST, read_from: ast.AST) -> None:
        if isinstance(key, ast.Constant) and key.value in META_FIELDS and meta_valued(read_from):
            found.append(f"{where}:{node.lineno}: {text(node)[:80]}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            hit(node, node.slice, node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
              and node.func.attr in ("get", "pop", "setdefault")):
            hit(node, node.args[0], node.func.value)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            hit(node, node.left, node.comparators[0])
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def test_only_the_record_module_reads_meta_json_by_key():
    found = [f for path in modules_and_scripts()
             if str(path.relative_to(REPO)) != RECORD_MODULE for f in meta_key_reads(path)]
    assert not found, "read meta.json through testbed.record.Meta, by attribute:\n" + "\n".join(found)


def test_the_meta_key_check_finds_what_it_is_for(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text('a = meta["seed"]\n'
                      'b = rundir.load_meta(d).get("scale")\n'
                      'c = "parts" in run_meta\n'
                      'meta["schema"] = 2\n'
                      'last = (load_meta(d).get("runs") or [{}])[-1]\n'
                      'f = last.get("points_missing")\n'
                      'for part in meta.parts:\n'
                      '    g = part["name"]\n'
                      'h = meta.backend\n'
                      'i = field.metadata["doc"]\n'
                      'j = spec["name"]\n'
                      'k = meta.sweep.get("mtu")\n'
                      'm = meta.sweep.mtu\n')
    assert [f.split(":")[1] for f in meta_key_reads(sample)] == ["1", "2", "3", "4", "5", "6", "8", "12"]


#: What renders a reproduction's evaluation (analysis.reproduction.evaluate), and what asks for it.
EVALUATION_READERS = ("analysis/reproduction_report.py", "cli/report.py")


def test_the_reproduction_report_reads_the_evaluation_by_attribute():
    """A reproduction's verdicts are dataclasses (analysis.reproduction.Evaluation): what renders them reads
    no value by a string key of theirs."""
    from analysis import reproduction

    names = frozenset(f.name for kind in (reproduction.Evaluation, reproduction.ClaimVerdict,
                                          reproduction.MeasuredValue, reproduction.ValueComparison,
                                          reproduction.TransferRatio, reproduction.PartSummary,
                                          reproduction.PartPenalty, reproduction.TransactionSummary)
                      for f in dataclasses.fields(kind))
    found = [f for path in EVALUATION_READERS for f in string_key_reads(REPO / path, names)]
    assert not found, "read the evaluation by attribute:\n" + "\n".join(found)


def string_key_reads(path: Path, keys: frozenset[str]) -> list[str]:
    """Subscripts and ``.get``/``.pop``/``.setdefault`` with one of ``keys`` written out as a string."""
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript):
            key = node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
              and node.func.attr in ("get", "pop", "setdefault")):
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in keys:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.get_source_segment(source, node)[:80]}")
    return found


def command_line_below_cli(path: Path) -> list[str]:
    """Where a module imports argparse, calls a ``main(...)`` (someone's command line, run as a function)
    or has a ``__main__`` block: what only the command line (cli/) and the programs on top may do."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names) or \
                isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: imports argparse")
        elif isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id == "main"
                                             or isinstance(node.func, ast.Attribute) and node.func.attr == "main"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: calls main(...)")
        elif isinstance(node, ast.If) and "__main__" in ast.dump(node.test):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: a __main__ block")
    return found


#: The processes the testbed starts of its own, which are programs without being commands: the speed
#: probe runs as a file of its own (``python -S``, no site-packages), pinned to a spare CPU, and so does
#: the spinner that keeps a guest's CPU awake.
OWN_PROCESSES = {"testbed/speedprobe.py", "testbed/awake.py"}


@pytest.mark.parametrize("path", [p for p in modules_and_scripts() if p.parts[len(REPO.parts)] != "cli"
                                  and str(p.relative_to(REPO)) not in OWN_PROCESSES],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_below_the_command_line_parses_arguments_or_runs_a_main(path):
    found = command_line_below_cli(path)
    assert not found, "the command line makes a Job; below it, code takes typed arguments:\n" + "\n".join(found)


def test_the_command_line_check_finds_what_it_is_for(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    sample = tmp_path / "x.py"
    sample.write_text("import argparse\nfrom cli.sweep import main\nmain(['--rates', '10'])\nsweep.main([])\n"
                      "if __name__ == '__main__':\n    pass\n")
    assert sorted(f.split(": ", 1)[1] for f in command_line_below_cli(sample)) == [
        "a __main__ block", "calls main(...)", "calls main(...)", "imports argparse"]


def test_no_module_beside_the_shims_has_a_standard_librarys_name():
    """``python experiments/packet_size_sweep.py`` puts experiments/ first on sys.path: a module there named as
    one of the standard library's (bisect, for one) would stand in for it in every import, a library's too."""
    import sys

    clash = sorted(p.name for p in (REPO / "experiments").glob("*.py") if p.stem in sys.stdlib_module_names)
    assert not clash, f"rename (the shims' directory is on sys.path when they run): {clash}"
