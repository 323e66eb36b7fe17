"""Make an entry-point script of the project run with any Python: the project's own.

Imported first by every script in ``experiments/`` and ``benchmarks/`` (``import _bootstrap``;
the script's directory is on ``sys.path``).  It puts the checkout on ``sys.path`` and, when
the running Python is not the project's virtualenv, runs the script again under
``.venv/bin/python`` with the same arguments; where there is no virtualenv yet it says in
one line how to make one.  Standard library only: it runs before anything is installed.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO, ".venv")
#: Written by scripts/install.sh once the virtualenv has everything.
STAMP = os.path.join(VENV, ".ipsec-testbed-installed")


def _in_venv() -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(VENV)


if REPO not in sys.path:
    sys.path.insert(0, REPO)
if not _in_venv():
    script = os.path.abspath(sys.argv[0])
    python = os.path.join(VENV, "bin", "python")
    if not (os.path.exists(STAMP) and os.access(python, os.X_OK)):
        run = os.path.relpath(os.path.join(REPO, "run"))
        run = run if "/" in run else f"./{run}"
        sys.stderr.write(f"{os.path.basename(script)}: the project's virtualenv is not installed: "
                         f"run `sudo {run} install` first\n")
        sys.exit(1)
    os.execv(python, [python, script, *sys.argv[1:]])
