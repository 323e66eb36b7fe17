"""How commands fail: one line, the documented exit statuses, SIGTERM unwinding only its own process."""
import os
import subprocess
import sys
import textwrap

import pytest

from cli.options import Parser
from testbed.errors import EXIT_SIGINT, EXIT_SIGTERM, Terminated, one_line, run_main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_parser_error_is_one_line_with_exit_2(capsys):
    p = Parser(prog="tool")
    p.add_argument("--rate", type=float)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--rate", "fast"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("tool: error: argument --rate: invalid float value: 'fast'")
    assert "see tool --help" in err


@pytest.mark.parametrize("exc, status, text", [
    (ValueError("rates must be positive"), 2, "tool: error: rates must be positive\n"),
    (RuntimeError("iperf3 server exited"), 1, "tool: iperf3 server exited (--debug shows where)\n"),
    (KeyboardInterrupt(), EXIT_SIGINT, "tool: interrupted\n"),
    (Terminated(), EXIT_SIGTERM, "tool: terminated\n"),
])
def test_run_main_statuses(capsys, exc, status, text):
    def work():
        raise exc
    assert run_main("tool", work) == status
    assert capsys.readouterr().err == text


def test_debug_shows_the_traceback(capsys):
    def work():
        raise OSError("no such file")
    assert run_main("tool", work, debug=True) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "OSError: no such file" in err


def test_multi_line_messages_become_one_line():
    assert one_line(RuntimeError("guest died\n  last console lines:\n  panic")) == \
        "guest died last console lines: panic"
    assert one_line(RuntimeError("")) == "RuntimeError"


def run_py(code: str, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_sigterm_unwinds_with_blocks_and_exits_143():
    out = run_py("""
        import os, signal, sys
        from testbed.errors import run_main
        def work():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                signal.pause()
            finally:
                print("teardown ran", flush=True)
            return 0
        sys.exit(run_main("tool", work))
    """)
    assert out.returncode == EXIT_SIGTERM
    assert out.stdout == "teardown ran\n"
    assert out.stderr == "tool: terminated\n"


def test_sigterm_in_a_forked_copy_ends_the_copy_only():
    # Libraries (pyroute2's netns helpers) fork copies of the program and stop them with
    # SIGTERM; the copy must exit, not run the parent's teardown and carry on.
    out = run_py("""
        import os, signal, sys, time
        from testbed.errors import run_main
        def work():
            ready, told = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.write(told, b"in")  # the copy is inside the block the signal must not unwind
                    time.sleep(30)
                finally:
                    print("the copy unwound the parent's work", flush=True)
            assert os.read(ready, 2) == b"in"
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            print("child status", os.waitstatus_to_exitcode(status), flush=True)
            return 0
        sys.exit(run_main("tool", work))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"child status {EXIT_SIGTERM}\n"


def test_a_signal_inside_a_critical_block_waits_for_its_end():
    out = run_py("""
        import os, signal, sys
        from testbed.errors import critical, run_main
        def work():
            try:
                with critical():
                    os.kill(os.getpid(), signal.SIGINT)
                    os.kill(os.getpid(), signal.SIGINT)  # a second one must not cut the block short
                    print("the block finished", flush=True)
                print("after the block: never", flush=True)
            finally:
                print("teardown ran", flush=True)
            return 0
        sys.exit(run_main("tool", work))
    """)
    assert out.returncode == EXIT_SIGINT
    assert out.stdout == "the block finished\nteardown ran\n"
    assert out.stderr == "(SIGINT: stopping once this step is done)\ntool: interrupted\n"
