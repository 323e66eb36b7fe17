"""``python -m cli.job [FILE]``: run one :class:`~experiments.job.Job`, the one a guest was handed or
the one in FILE.

Not a command for people: it is how a job reaches the process that runs it.  In a User-Mode Linux
guest the host hands the job over inside :mod:`testbed.handoff` and the guest runs ``python -m
cli.job``; a paired A/B starts each side as ``python -m cli.job FILE`` (:func:`experiments.runner.spawn`),
a process of its own that boots its own guest.  Either way the job runs through
:func:`experiments.runner.run`, which measures where the job's kernel is; what a kind of work does
there is :func:`work_of`'s answer.  The exit status is the work's.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from experiments import benchmark, runner
from experiments.job import BenchWork, DemoWork, Job
from testbed.errors import run_main


def work_of(job: Job) -> Callable[[Job], int]:
    """What runs ``job``'s work where its kernel is: the engine's measurement for a sweep or a
    reproduction, the demo's network, a benchmark's ``in_guest``."""
    if isinstance(job.work, DemoWork):
        return demo_work
    if isinstance(job.work, BenchWork):
        return benchmark.in_guest
    return runner.measure


def demo_work(job: Job) -> int:
    """The demo where the network is: behind the page's channel (``web``) or with Mininet's command line."""
    demo = job.work
    if demo.web:
        from cli.webdemo import engine
        from testbed import channel

        ends = channel.job_end()
        if ends is None:
            raise RuntimeError("the web demo's engine runs with the page's channel, and none was handed to it")
        return engine.serve(demo.topology, demo.profile, demo.mode, demo.rate_mbit, demo.clients, demo.keying, ends)
    from cli.demo import run_demo

    return run_demo(demo.topology, demo.profile, demo.mode, demo.rate_mbit, demo.clients, demo.pcap,
                    keying=demo.keying)


def prog_of(job: Job) -> str:
    """What the job's messages call it: the command that made it."""
    return " ".join(job.command[:3] if job.kind == "reproduce" else job.command[:2]) or f"ipsec-testbed {job.kind}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv:
        with open(argv[0]) as f:
            job = Job.loads(f.read())
    else:
        job = runner.received()
        if job is None:
            print("python -m cli.job: no job: give a job file, or run it in a guest the host handed one",
                  file=sys.stderr)
            return 2
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(job.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    prog = prog_of(job)
    interactive = isinstance(job.work, DemoWork) and not job.work.web
    return run_main(prog, lambda: runner.run(job, prog, work_of(job), interactive=interactive))


if __name__ == "__main__":
    sys.exit(main())
