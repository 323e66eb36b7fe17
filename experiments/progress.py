"""A progress bar with ETA for long measurements, standard library only but for the record it shows.

Experiments run inside User-Mode Linux, where importing a large library costs half a
second of every run; this is the little the scripts need: one line per task with a
description, a bar, done/total, elapsed time and ETA, redrawn in place on a terminal.
Written to a pipe or a file (a CI log) it prints one line per finished step instead,
so the log keeps every point's result.
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import TextIO

from testbed import counting
from testbed.record import Bound, TransactionRecord, as_record

BAR_WIDTH = 24


def now() -> float:
    """The user's clock, in seconds: elapsed times and ETAs are the user's, in a counted guest too (whose own
    clock skips ahead whenever it idles)."""
    return counting.user_time()


def clock(seconds: float | None) -> str:
    """``h:mm:ss`` (pure); ``-:--:--`` when unknown."""
    if seconds is None or seconds < 0 or seconds != seconds:
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def bar(done: int, total: int | None, width: int = BAR_WIDTH) -> str:
    """A bar of ``width`` cells, ``done`` of ``total`` full (pure)."""
    if not total:
        return "-" * width
    full = min(width, int(width * done / total))
    return "#" * full + "-" * (width - full)


class _Task:
    def __init__(self, description: str, total: int | None) -> None:
        self.description = description
        self.total = total
        self.completed = 0
        self.started = now()
        self.initial: int | None = None  # what was done before this run (a resumed sweep)
        self.first_done: float | None = None  # when this run's first step finished
        self.done_at_first = 0


class Progress:
    """Tasks shown one line each; ``update`` as rich's Progress (total, completed, description)."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.tasks: list[_Task] = []

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.live and self.tasks:
            self.stream.write("\n")
            self.stream.flush()

    def add_task(self, description: str, total: int | None = None) -> int:
        if self.live and self.tasks:
            self.stream.write("\n")  # the previous task's line stays as it ended
        self.tasks.append(_Task(description, total))
        self._draw(self.tasks[-1])
        return len(self.tasks) - 1

    def update(self, task_id: int, *, total: int | None = None, completed: int | None = None,
               description: str | None = None) -> None:
        task = self.tasks[task_id]
        advanced = completed is not None and completed != task.completed
        if total is not None:
            task.total = total
        if completed is not None:
            if task.initial is None:
                task.initial = completed
            elif task.first_done is None and completed > task.completed:
                task.first_done, task.done_at_first = now(), completed
            task.completed = completed
        if description is not None:
            task.description = description
        if self.live:
            self._draw(task)
        elif advanced:
            self.stream.write(self.line(task) + "\n")
            self.stream.flush()

    def eta(self, task: _Task) -> float | None:
        """Seconds left: at the pace since this run's first step finished, or that step's own pace before."""
        if not task.total or task.first_done is None:
            return None
        if task.completed > task.done_at_first:
            pace = (now() - task.first_done) / (task.completed - task.done_at_first)
        else:  # the first step's time, start-up included: an overestimate, soon replaced
            pace = (task.first_done - task.started) / max(1, task.done_at_first - (task.initial or 0))
        return pace * (task.total - task.completed)

    def line(self, task: _Task, width: int | None = None) -> str:
        total = "?" if task.total is None else str(task.total)
        tail = (f" {bar(task.completed, task.total)} {task.completed}/{total} "
                f"{clock(now() - task.started)} ETA {clock(self.eta(task))}")
        description = task.description
        if width:
            room = max(10, width - len(tail) - 1)
            if len(description) > room:
                description = description[:room - 1] + "…"
            description = description.ljust(room)
        return description + tail

    def _draw(self, task: _Task) -> None:
        if not self.live or task is not self.tasks[-1]:
            return
        width = shutil.get_terminal_size((100, 24)).columns
        self.stream.write("\r" + self.line(task, width - 1))
        self.stream.flush()


def progress_bar(stream: TextIO | None = None) -> Progress:
    """A :class:`Progress` on ``stream`` (default stderr); ``IPSEC_TESTBED_PROGRESS=lines`` forces line mode."""
    p = Progress(stream or sys.stderr)
    if os.environ.get("IPSEC_TESTBED_PROGRESS") == "lines":
        p.live = False
    return p


def progress_callback(bar, task, prefix: str = "") -> Callable:
    """A sweep ``progress(point, record, done, total)`` that drives a rich progress ``task``: ``record``
    is None before the point, then its :class:`~testbed.record.Record` (or its results.jsonl line),
    a transactions part's (:mod:`experiments.reproduce`) a
    :class:`~testbed.record.TransactionRecord`."""
    def progress(point, record, done, total):
        label = f"{prefix}{point.describe()}"
        if record is None:
            bar.update(task, total=total, completed=done, description=label)
            return
        record = as_record(record)
        if record.failed:
            bar.update(task, completed=done, description=f"{label}: FAILED ({record.error})")
        elif isinstance(record, TransactionRecord):  # its timing: no goodput, no bound
            bar.update(task, completed=done, description=f"{label}: {record.mean_ms:.2f} ms")
        else:
            bound, goodput = record.bound, record.goodput_mbps
            flag = (f" [{bound}-bound]" if bound in (Bound.CPU, Bound.OTHER)
                    else " [ANOMALY, left out of the means]" if bound is Bound.ANOMALY else "")
            if goodput is None:
                value = "no goodput"
            elif goodput < 0:  # counters that went backwards: no figure to show
                value = "no goodput (its counters went backwards)"
            else:
                value = f"{goodput:.2f} Mbit/s"
            bar.update(task, completed=done, description=f"{label}: {value}{flag}")
    return progress
