"""The experiments' progress bar: its pieces, and the line-per-step output a CI log gets."""
from __future__ import annotations

import io

from experiments import progress


def test_clock_and_bar():
    assert progress.clock(3725) == "1:02:05"
    assert progress.clock(None) == "-:--:--"
    assert progress.bar(0, 4, width=8) == "--------"
    assert progress.bar(2, 4, width=8) == "####----"
    assert progress.bar(9, 4, width=8) == "########"
    assert progress.bar(1, None, width=4) == "----"


def test_a_log_gets_one_line_per_step_with_counts():
    out = io.StringIO()  # not a terminal
    with progress.Progress(out) as p:
        t = p.add_task("sweep")
        p.update(t, total=3, completed=1, description="resumed")  # a resumed run starts at 1
        p.update(t, description="measuring")  # no step: no line
        p.update(t, completed=2, description="point 2: 9.50 Mbit/s")
        p.update(t, completed=3, description="point 3: 9.60 Mbit/s")
    lines = out.getvalue().splitlines()
    assert [line.split(" #")[0].split(" -")[0] for line in lines] == [
        "resumed", "point 2: 9.50 Mbit/s", "point 3: 9.60 Mbit/s"]
    assert lines[-1].split()[-4:-2] == ["3/3", "0:00:00"] and "\r" not in out.getvalue()


def test_eta_counts_only_this_runs_steps():
    p = progress.Progress(io.StringIO())
    t = p.add_task("x", total=10)
    task = p.tasks[t]
    p.update(t, completed=4)  # already measured by an earlier run
    assert p.eta(task) is None
    task.started -= 10  # the first point of this run took 10 s
    p.update(t, completed=5)
    assert 9 * 5 <= p.eta(task) <= 10 * 5 + 1


def test_the_sweeps_line_never_shows_an_impossible_goodput():
    from experiments.engine.plan import Point
    from experiments.runner import progress_callback

    class Bar:
        def update(self, task, **kw):
            self.description = kw.get("description")

    bar = Bar()
    show = progress_callback(bar, 0)
    point = Point("vpn_gateway", "aes-gcm-256", "tunnel", 4, "tcp", 100.0, 100, "mss", 1, "", 0)
    show(point, {"goodput_mbps": 41.7, "bound": "cpu"}, 1, 2)
    assert bar.description.endswith("rep 1: 41.70 Mbit/s [cpu-bound]")
    show(point, {"goodput_mbps": -39.2, "bound": "anomaly"}, 2, 2)
    assert "-39" not in bar.description
    assert bar.description.endswith(": no goodput (its counters went backwards) [ANOMALY, left out of the means]")
