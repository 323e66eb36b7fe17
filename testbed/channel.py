"""A two-way channel of JSON lines between a process on the host and a job on a backend.

The web demo's page is served on the host, where the browser is; its network may live in a
User-Mode Linux guest, which has no network to the host.  What joins them is this channel: two
pipes on the host, which the UML backend hands the guest as a console of its own (``con4``,
``/dev/tty4`` in the guest, in raw mode: the same kind of line the CPU meter uses on tty3), and
which the host backend hands a child process as two inherited file descriptors.  Either way the
job finds its end in ``$IPSEC_TESTBED_CHANNEL`` and opens it with :func:`job_end`; in one
process (the job runs on the host kernel) :meth:`Channel.job_files` gives the same two files::

    host                                        job (guest or host)
    Channel().send({...})  --- to_job ------->  job_end().receive()
    Channel().receive()    <-- from_job ------  job_end().send({...})

One message is one JSON object on one line, so either end reads with ``readline``; a closed
end reads as ``None`` (end of file), which is how the job learns that the host has gone.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any, BinaryIO

#: The environment variable naming the job's end: ``fd:R,W`` (inherited descriptors) or a tty's path.
ENV = "IPSEC_TESTBED_CHANNEL"
#: The guest's console that carries the channel (the UML backend's ``con4``).
GUEST_TTY = "/dev/tty4"


class Ends:
    """One end of the channel: a file to read lines from, a file to write lines to."""

    def __init__(self, reader: BinaryIO, writer: BinaryIO) -> None:
        self.reader, self.writer = reader, writer
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message; False when the other end has gone."""
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                self.writer.write(line)
                self.writer.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                return False

    def receive(self) -> dict[str, Any] | None:
        """The next message (blocks); None at end of file, when the reader is closed too (one thread reads,
        and it owns the reader).  A line that is not a JSON object is skipped (a tty may deliver a stray
        byte at start)."""
        while True:
            try:
                line = self.reader.readline()
            except (OSError, ValueError):
                return None
            if not line:
                with contextlib.suppress(OSError):
                    self.reader.close()
                return None
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                return message

    def close(self) -> None:
        """Close the writing side: the other end reads end of file, and its answer of end of file closes
        this end's reader (closing a file another thread is reading from would wait for that read)."""
        with self._lock, contextlib.suppress(OSError):
            self.writer.close()


class Channel(Ends):
    """The host's end, with the pipes a job's end is made of (:attr:`job_fds`, :meth:`job_files`)."""

    def __init__(self) -> None:
        to_job_r, to_job_w = os.pipe()
        from_job_r, from_job_w = os.pipe()
        #: the job's end as descriptors: (it reads, it writes)
        self.job_fds = (to_job_r, from_job_w)
        self._job_fds_ours = True  # until a child has them (job_started) or files in this process (job_files)
        super().__init__(os.fdopen(from_job_r, "rb"), os.fdopen(to_job_w, "wb"))

    def job_files(self) -> Ends:
        """The job's end in this process (a job run on the host kernel, in a thread or the main thread)."""
        r, w = self.job_fds
        self._job_fds_ours = False
        return Ends(os.fdopen(r, "rb"), os.fdopen(w, "wb"))

    def job_started(self) -> None:
        """Close this process's copies of the job's descriptors (once the job has ended, or a child holds
        them), so that this end reads end of file when the job's goes."""
        if not self._job_fds_ours:
            return
        self._job_fds_ours = False
        for fd in self.job_fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def job_env(fds: tuple[int, int]) -> str:
    """``$IPSEC_TESTBED_CHANNEL`` for a child that inherits ``fds`` (it reads, it writes)."""
    return f"fd:{fds[0]},{fds[1]}"


def job_end(value: str | None = None) -> Ends | None:
    """The job's end named by ``value`` (default ``$IPSEC_TESTBED_CHANNEL``); None when there is none."""
    value = os.environ.get(ENV) if value is None else value
    if not value:
        return None
    if value.startswith("fd:"):
        r, w = (int(n) for n in value[3:].split(","))
        return Ends(os.fdopen(r, "rb"), os.fdopen(w, "wb"))
    # a console (raw, set by the guest's init): two opens, one buffered reader and one writer
    return Ends(open(value, "rb"), open(value, "wb", buffering=0))
