"""How every command of the testbed fails: one line, a nonzero exit, no traceback.

Each entry point (``ipsec-testbed``, ``experiments/*.py``, ``ipsec-testbed report``)
builds its parser with :class:`cli.options.Parser` and runs its work through :func:`run_main`:

- a bad option or value: ``prog: error: <what> (see prog --help)``, exit 2, no usage dump;
- a value the specs reject (``ValueError``): ``prog: error: <what>``, exit 2;
- :class:`Refused` (the command will not go on, and says why): ``prog: <why>``, exit 1;
- any other error while working: ``prog: <what went wrong> (--debug shows where)``, exit 1;
- ``--debug`` shows the traceback instead of the one line;
- Ctrl-C (SIGINT) or SIGTERM: the work is unwound (every ``with`` block tears its
  network down), then exit 130 or 143, as a shell reports a process killed by them.

SIGTERM is turned into the exception :class:`Terminated` by :func:`handle_signals`, so
``kill PID``, a CI runner's timeout or ``systemctl stop`` clean up exactly as Ctrl-C does.
Inside :func:`critical` blocks (building a network, switching IPsec) both signals wait
until the block is done.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator

#: Exit statuses, as shells report a process ended by SIGINT or SIGTERM.
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived; a BaseException so that ``except Exception`` does not swallow it."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


_installed_by = 0
_critical = 0
_pending: BaseException | None = None


def _on_signal(signum, _frame) -> None:
    global _pending
    if os.getpid() != _installed_by:
        # A forked copy of this program (a library's helper child): it must die as told,
        # not unwind the parent's work from inside the copy.
        os._exit(128 + signum)
    # Once unwinding has begun, a second signal must not interrupt the teardown.
    signal.signal(signum, signal.SIG_IGN)
    exc = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    if _critical:
        _pending = _pending or exc
        print(f"({signal.Signals(signum).name}: stopping once this step is done)", file=sys.stderr, flush=True)
        return
    raise exc


def handle_signals() -> None:
    """Turn SIGINT into KeyboardInterrupt, SIGTERM and SIGHUP (a closed terminal) into
    :class:`Terminated`, in this process, held back inside :func:`critical` blocks (call
    from an entry point)."""
    global _installed_by
    _installed_by = os.getpid()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _on_signal)


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """A block that SIGINT and SIGTERM do not cut short: they take effect as it ends.

    For work that must not stop half way through a library's state machine: building
    or tearing down a network, installing SAs, changing qdiscs.  Raising an exception
    at an arbitrary point of pyroute2's asyncio code leaves its generators broken.
    """
    global _critical, _pending
    _critical += 1
    try:
        yield
    finally:
        _critical -= 1
        if not _critical and _pending is not None:
            exc, _pending = _pending, None
            raise exc


class Refused(RuntimeError):  # noqa: N818 (raise Refused(why): a verdict, not a fault)
    """The command will not go on, for the reason its message gives (not a fault: no --debug hint)."""


def one_line(e: BaseException) -> str:
    """An exception as one line: its message with the lines joined."""
    text = " ".join(part.strip() for part in str(e).splitlines() if part.strip())
    return text or type(e).__name__


def run_main(prog: str, work: Callable[[], int], debug: bool = False) -> int:
    """Run ``work()`` and turn what escapes it into an exit status (see the module docstring)."""
    handle_signals()
    try:
        return work()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except Terminated as e:
        print(f"{prog}: terminated", file=sys.stderr)
        return 128 + e.signum
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 (the one place every error is reported)
        if debug:
            traceback.print_exc()
        elif isinstance(e, ValueError):  # specs reject bad values with ValueError: the user's input
            print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        elif isinstance(e, Refused):
            print(f"{prog}: {one_line(e)}", file=sys.stderr)
        else:
            print(f"{prog}: {one_line(e)} (--debug shows where)", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1


def fail(prog: str, message: str, status: int = 1) -> int:
    """Print ``prog: message`` on stderr and return ``status`` (for ``return fail(...)``)."""
    print(f"{prog}: {message}", file=sys.stderr)
    return status

