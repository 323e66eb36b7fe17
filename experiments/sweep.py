"""The sweep engine: topology x profiles x IP versions x transports x rates x sizes x repetitions.

::

    SweepSpec (data) --plan_points--> [Point, ...] --run_sweep--> run_dir/results.jsonl
                                                                  run_dir/meta.json

The network is built once per sweep: the shaped link is re-shaped for each rate and
IPsec is switched on and off in place; within a rate the points are ordered repetition, size, IP version,
transport, profile, so the plain and IPsec points of one size are measured next to
each other, under the same machine conditions; the profile order alternates
(ABBA) so that IPsec is switched only every other point.  The next point's iperf3
clients are started during each point's warm-up and held until their turn
(:class:`Ahead`), and CPU use is sampled over the measured seconds only.

Every point is appended to ``results.jsonl`` and flushed to disk as soon as it is
measured; running again on the same directory measures only the points missing, so
a sweep killed at any moment loses at most the point in flight.

A point whose iperf3 test fails (the server died, the test hung) is tried once more
with fresh servers; if that fails too it is recorded with ``"failed": true`` and the
reason, and the sweep goes on.  A failed point counts as missing: the next run on the
directory measures it again, and the analysis ignores the failed record.

One sweep at a time writes to a run directory: it holds an exclusive lock on
``run_dir/.lock`` while it runs, and a second sweep on the same directory is refused.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import logging
import os
import platform
import re
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

from testbed.errors import Refused

log = logging.getLogger(__name__)

TRANSPORTS = ("tcp", "udp")
SIZE_MODES = ("mss", "write", "datagram")
#: A point is flagged when the CPU was this busy and goodput fell this far below theory.
CPU_BOUND_PCT = 90.0
SHORTFALL = 0.90
#: How far into a point's warm-up the next point's iperf3 clients are started (see Ahead).
AHEAD_AFTER_S = 0.25
#: Tries per point before it is recorded as failed.
ATTEMPTS = 2
LOCK_FILE = ".lock"
#: meta.json's tool versions, handed from the host to a UML guest (JSON).
VERSIONS_ENV = "IPSEC_TESTBED_VERSIONS"
#: The host's CPU model, handed to a UML guest for meta.json.
HOST_CPU_ENV = "IPSEC_TESTBED_HOST_CPU"
KEY_FIELDS = ("topology", "profile", "mode", "ip_version", "transport", "rate_mbit", "size_bytes",
              "size_mode", "clients", "repetition")


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """What to measure; checked on construction (no kernel needed)."""

    topology: str = "vpn_gateway"
    profiles: tuple[str, ...] = ("none", "aes-gcm-256")
    mode: str = "tunnel"
    ip_versions: tuple[int, ...] = (4,)
    transports: tuple[str, ...] = ("tcp",)
    rates_mbit: tuple[float, ...] = (10.0, 100.0)
    sizes: tuple[int, ...] = (100, 250, 500, 750, 1000, 1250, 1460)
    size_mode: str = "mss"
    clients: int = 1
    repetitions: int = 3
    duration_s: int = 2
    omit_s: int = 1
    udp_bitrate: str = "0"
    pmtu: str = "discover"
    mtu: int = 1500
    #: socket buffer of both iperf3 ends in bytes (iperf3 -w; seed 002's 65535), None: the kernel's
    socket_buffer: Optional[int] = None

    def __post_init__(self) -> None:
        from ipsec.profiles import parse_profile
        from topologies import build_spec

        profiles = tuple(dict.fromkeys(parse_profile(p).name for p in self.profiles))
        if "none" not in profiles:
            profiles = ("none",) + profiles  # the plain baseline is always measured
        object.__setattr__(self, "profiles", profiles)
        # A value given twice is measured once (in the order first given).
        object.__setattr__(self, "rates_mbit", tuple(dict.fromkeys(float(r) for r in self.rates_mbit)))
        for name in ("sizes", "ip_versions", "transports"):
            object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
        # the network first: its MTU bounds the sizes checked below
        build_spec(self.topology, clients=self.clients, mtu=self.mtu, pmtu=self.pmtu)  # validates
        if self.mode not in ("transport", "tunnel"):
            raise ValueError(f"mode must be transport or tunnel, not {self.mode!r}")
        if not self.ip_versions or set(self.ip_versions) - {4, 6}:
            raise ValueError(f"ip_versions must be 4, 6 or both, not {self.ip_versions!r}")
        if not self.transports or set(self.transports) - set(TRANSPORTS):
            raise ValueError(f"transports must be among {', '.join(TRANSPORTS)}, not {self.transports!r}")
        if not self.rates_mbit or min(self.rates_mbit) <= 0:
            raise ValueError(f"rates must be positive Mbit/s values, not {self.rates_mbit!r}")
        if self.size_mode not in SIZE_MODES:
            raise ValueError(f"size_mode must be one of {', '.join(SIZE_MODES)}, not {self.size_mode!r}")
        if not self.sizes or min(self.sizes) < 16 or max(self.sizes) > 65000:
            raise ValueError(f"sizes must be bytes in 16..65000, not {self.sizes!r}")
        if self.size_mode == "mss" and (min(self.sizes) < 88 or max(self.sizes) > self.mtu - 40):
            raise ValueError(f"with size_mode mss the sizes are TCP MSS values: 88..{self.mtu - 40} "
                             f"for MTU {self.mtu}, not {min(self.sizes)}..{max(self.sizes)}")
        if not re.match(r"^[0-9]+(\.[0-9]+)?[KMG]?$", str(self.udp_bitrate)):
            raise ValueError(f"udp_bitrate must be a rate as iperf3 -b takes it (0 = unlimited, 50M, 1.5G), "
                             f"not {self.udp_bitrate!r}")
        if self.repetitions < 1:
            raise ValueError("repetitions must be >= 1")
        # iperf3 (3.12) reads -t and -O as whole seconds: 1.5 would silently be 1, 0.5 none
        if isinstance(self.duration_s, bool) or self.duration_s != int(self.duration_s) or self.duration_s < 1:
            raise ValueError(f"duration must be whole seconds >= 1 (iperf3 -t), not {self.duration_s!r}")
        if isinstance(self.omit_s, bool) or self.omit_s != int(self.omit_s) or self.omit_s < 0:
            raise ValueError(f"warm-up must be whole seconds >= 0 (iperf3 -O), not {self.omit_s!r}")
        if self.socket_buffer is not None and not (isinstance(self.socket_buffer, int)
                                                   and 2048 <= self.socket_buffer <= 64 * 2**20):
            raise ValueError(f"socket buffer must be bytes in 2048..{64 * 2**20} (iperf3 -w), "
                             f"not {self.socket_buffer!r}")
        object.__setattr__(self, "duration_s", int(self.duration_s))
        object.__setattr__(self, "omit_s", int(self.omit_s))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "SweepSpec":
        """The spec :meth:`to_json` wrote (JSON turned its tuples into lists)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclasses.dataclass(frozen=True)
class Point:
    """One measurement: its key fields, as in ``results.jsonl``."""

    topology: str
    profile: str
    mode: str
    ip_version: int
    transport: str
    rate_mbit: float
    size_bytes: int
    size_mode: str
    clients: int
    repetition: int

    def key(self) -> tuple:
        return tuple(getattr(self, f) for f in KEY_FIELDS)


def record_key(record: dict) -> tuple:
    """The key of a result record (what makes a point unique)."""
    return tuple(float(record[f]) if f == "rate_mbit" else record[f] for f in KEY_FIELDS)


def plan_points(spec: SweepSpec) -> list[Point]:
    """Every point of ``spec`` in measuring order (see the module docstring)."""
    points = []
    for rate in spec.rates_mbit:
        turn = 0
        for rep in range(spec.repetitions):
            for size in spec.sizes:
                for ipv in spec.ip_versions:
                    for transport in spec.transports:
                        size_mode = "datagram" if transport == "udp" else spec.size_mode
                        # ABBA order (none, IPsec, IPsec, none, ...): still side by side, but each
                        # profile is measured twice running, so IPsec is switched half as often.
                        order = spec.profiles if turn % 2 == 0 else spec.profiles[::-1]
                        turn += 1
                        for profile in order:
                            points.append(Point(spec.topology, profile, spec.mode, ipv, transport, float(rate),
                                                size, size_mode, spec.clients, rep))
    return points


def estimate_seconds(spec: SweepSpec, points: int, per_point_overhead_s: float = 0.3,
                     per_network_s: float = 6.0) -> float:
    """A rough wall-time estimate (measurement + setup) for ``points`` points (UML figures)."""
    return points * (spec.duration_s + spec.omit_s + per_point_overhead_s) + per_network_s


# -- results files ------------------------------------------------------------------------

def load_done(path: str) -> set[tuple]:
    """Keys of the points already in ``results.jsonl``; a partial last line is ignored."""
    done = set()
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # the point in flight when a run was killed
                try:
                    record = json.loads(line)
                    if not record.get("failed"):
                        done.add(record_key(record))
                except (json.JSONDecodeError, KeyError, AttributeError):
                    log.warning("skipping a malformed line in %s", path)
    except FileNotFoundError:
        pass
    return done


def pending(run_dir: str, points: list) -> tuple[str, list]:
    """``run_dir``'s results.jsonl (the directory made if missing) and those of ``points`` it lacks, in order."""
    os.makedirs(run_dir, exist_ok=True)
    results_path = os.path.join(run_dir, "results.jsonl")
    done = load_done(results_path)
    return results_path, [p for p in points if p.key() not in done]


def open_results(path: str):
    """``results.jsonl`` for appending, with a partial last line (a killed write) cut off."""
    if os.path.exists(path):
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
    return open(path, "a")


def append(f, record: dict) -> None:
    """One record, flushed to the disk before the next point starts."""
    f.write(json.dumps(record, sort_keys=True) + "\n")
    f.flush()
    os.fsync(f.fileno())


class RunDirBusy(Refused):
    """Another sweep is writing to this run directory."""


@contextlib.contextmanager
def locked_run_dir(run_dir: str):
    """Hold ``run_dir``'s lock for the block, or raise :class:`RunDirBusy` at once.

    An advisory ``flock`` on ``run_dir/.lock``; the kernel drops it when the holder
    exits, even by SIGKILL, so a dead sweep never leaves the directory locked.  A
    directory made here that is still empty afterwards (the sweep was refused before
    it measured anything) is removed again.
    """
    made = not os.path.isdir(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RunDirBusy(f"{run_dir} is being written by another sweep (pid {holder}): wait for it "
                             "to finish, or give this one another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            if made and os.listdir(run_dir) == [LOCK_FILE]:
                os.unlink(path)
                os.rmdir(run_dir)
    finally:
        os.close(fd)


def note_interrupted(run_dir: str, why: str) -> None:
    """Mark the last run in ``meta.json`` as ended by ``why`` (its process could not).

    For a sweep that ran inside User-Mode Linux: on SIGINT or SIGTERM the host kills the
    guest, whose own bookkeeping then never runs.
    """
    meta_path = os.path.join(run_dir, "meta.json")
    meta = _read_json(meta_path)
    if not meta.get("runs"):
        return
    last = meta["runs"][-1]
    last.setdefault("finished", now_iso())
    last["interrupted"] = why
    meta["finished"] = last["finished"]
    if meta.get("sweep"):
        with contextlib.suppress(TypeError, ValueError):  # a sweep this version cannot read
            meta["complete"] = is_complete(run_dir, SweepSpec.from_json(meta["sweep"]))
    _write_json(meta_path, meta)


def is_complete(run_dir: str, spec: SweepSpec) -> bool:
    """Whether every point of ``spec`` has a (not failed) record in ``run_dir``."""
    planned = {p.key() for p in plan_points(spec)}
    return planned <= load_done(os.path.join(run_dir, "results.jsonl"))


def tool_versions() -> dict:
    """Versions of iperf3, pyroute2, mininet, scapy and the testbed (git) as meta.json records them."""
    versions: dict = {}
    for name in ("pyroute2", "mininet", "scapy"):
        try:
            from importlib.metadata import version
            versions[name] = version(name)
        except Exception:  # noqa: BLE001 (any failure: unknown)
            versions[name] = None
    try:
        out = subprocess.run(["iperf3", "--version"], capture_output=True, text=True, timeout=10).stdout
        versions["iperf3"] = out.split()[1] if out else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        versions["iperf3"] = None
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        versions["testbed"] = subprocess.run(["git", "-C", repo, "describe", "--always", "--dirty"],
                                             capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        versions["testbed"] = None
    return versions


def cpu_model() -> str:
    """This kernel's CPU model name ("UML" inside User-Mode Linux), or ""."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        return ""


def machine_meta() -> dict:
    """What the results depend on: kernel, backend, CPU, tool versions."""
    from testbed import kernel

    cpu_model_name = cpu_model()
    meta = {"kernel_release": platform.release(), "backend": "uml" if kernel.in_uml() else "host",
            "cpu_model": cpu_model_name, "cpu_count": os.cpu_count(), "python": platform.python_version()}
    if os.environ.get(HOST_CPU_ENV):  # inside UML the guest's cpuinfo says "UML"
        meta["host_cpu_model"] = os.environ[HOST_CPU_ENV]
    # Found on the host before a UML boot (the same files, through hostfs), where starting
    # the two processes below costs a fraction of the time it does in the guest.
    shared = os.environ.get(VERSIONS_ENV)
    versions = json.loads(shared) if shared else tool_versions()
    meta["versions"] = versions
    return meta


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- measuring ----------------------------------------------------------------------------

def flows_of(net, ip_version: int) -> list:
    """The iperf3 flows of a built network: every (client, server) pair of its spec."""
    from experiments import iperf

    return [iperf.Flow(net.ns(server), net.ns(client), net.addr(server, ip_version))
            for client, server in net.spec.flows]


def switch_ipsec(net, current: str, profile: str, mode: str, families) -> str:
    """Put ``net`` from profile ``current`` to ``profile`` (a no-op when they are the same); returns ``profile``."""
    if profile != current:
        net.remove_ipsec()
        if profile != "none":
            net.apply_ipsec(profile, mode, families=families)
    return profile


def iperf_options(point: Point, spec: SweepSpec) -> dict:
    """:func:`experiments.iperf.measure_flows`' test options for ``point``."""
    return dict(duration_s=spec.duration_s, transport=point.transport, omit_s=spec.omit_s,
                mss=point.size_bytes if point.size_mode == "mss" else None,
                length=point.size_bytes if point.size_mode in ("write", "datagram") else None,
                bitrate=spec.udp_bitrate if point.transport == "udp" else None, window=spec.socket_buffer)


class Ahead:
    """The next point's iperf3 clients, started during this point's warm-up and held there.

    Starting iperf3 inside User-Mode Linux costs over a tenth of a second, most of it
    loading its libraries; :class:`experiments.iperf.Clients` does that ahead and holds
    the clients before they connect.  :meth:`start` is called :data:`AHEAD_AFTER_S`
    into a point's warm-up; :meth:`settle`, when the warm-up ends, kills any that has
    not yet reached its hold (the CPU was too busy to load it in time), so nothing but
    the point's own test runs in its measured seconds.  Without a warm-up nothing is
    started ahead.
    """

    def __init__(self, net, spec: SweepSpec, servers) -> None:
        self.net, self.spec, self.servers = net, spec, servers
        self.clients = None
        self.killed = 0  # clients not held in time (a figure for the log)
        self._lock = threading.Lock()

    def start(self, point: Point) -> None:
        from experiments import iperf

        flows = flows_of(self.net, point.ip_version)
        args = iperf.flow_args(flows, self.servers.ports, **iperf_options(point, self.spec))
        with self._lock:
            self._close()
            try:
                self.clients = iperf.Clients(flows, args)
            except (iperf.IperfError, OSError) as e:  # the next point starts its own
                log.warning("could not start the next point's iperf3 clients ahead: %s", e)

    def settle(self) -> None:
        with self._lock:
            if self.clients is not None and not self.clients.held():
                self.killed += 1
                log.info("the next point's iperf3 clients were not ready at the end of the warm-up: stopped")
                self._close()

    def take(self):
        """The clients started ahead (None if none), now the caller's."""
        with self._lock:
            clients, self.clients = self.clients, None
            return clients

    def _close(self) -> None:
        if self.clients is not None:
            self.clients.close()
            self.clients = None

    def close(self) -> None:
        with self._lock:
            self._close()


def measure_point(net, point: Point, spec: SweepSpec, servers=None, ahead: Optional[Ahead] = None,
                  following: Optional[Point] = None) -> dict:
    """Measure one point in the built network ``net`` (IPsec already as the point needs).

    With ``ahead``, this point uses the clients started ahead for it, if any, and
    starts ``following``'s during its warm-up.  CPU use is sampled over the measured
    seconds only (after the warm-up), as goodput is.
    """
    from experiments import cpu, iperf
    from ipsec.overhead import expected_point_goodput_mbps

    flows = flows_of(net, point.ip_version)
    window: dict = {}

    def started() -> None:
        window["t0"] = time.monotonic()
        window["cpu"] = cpu.Window(spec.omit_s, spec.duration_s, at_start=ahead.settle if ahead else None)
        if ahead and following and spec.omit_s > AHEAD_AFTER_S:
            time.sleep(AHEAD_AFTER_S)
            ahead.start(following)

    held = ahead.take() if ahead else None
    results = iperf.measure_flows(flows, on_start=started, servers=servers, held=held, **iperf_options(point, spec))
    use = window["cpu"].usage()
    goodput = sum(r.goodput_mbps for r in results)
    moved = sum(r.bytes for r in results)
    # TCP at an MSS or with bulk writes, UDP datagrams (fragmented or not): the link's goodput
    expected = expected_point_goodput_mbps(dataclasses.asdict(point), spec.mtu)
    limited = use is not None and use.busy_pct >= CPU_BOUND_PCT and (expected is None or goodput < SHORTFALL * expected)
    losses = [r.loss_pct for r in results if r.loss_pct is not None]
    retrans = [r.retransmits for r in results if r.retransmits is not None]
    return {
        **dataclasses.asdict(point),
        "duration_s": spec.duration_s, "omit_s": spec.omit_s,
        "goodput_mbps": goodput,
        # the receivers' own measuring interval (the goodput's denominator), mean over flows
        "measured_s": sum(r.seconds for r in results) / len(results),
        "theoretical_goodput_mbps": expected,
        "loss_pct": sum(losses) / len(losses) if losses else None,
        "retransmits": sum(retrans) if retrans else None,
        "bytes": moved,
        "cpu_busy_pct": use and use.busy_pct, "cpu_system_pct": use and use.system_pct,
        "cpu_softirq_pct": use and use.softirq_pct,
        "cpu_s_per_gb": use.busy_s / (moved / 1e9) if use and moved else None,
        "window_s": time.monotonic() - window["t0"],
        # iperf3's clients were started during the previous point's warm-up (see Ahead)
        "clients_ahead": held is not None and held.let_go,
        "emulation_limited": limited,
        "time": now_iso(),
    }


def measure_with_retry(net, point: Point, spec: SweepSpec, servers, ahead: Optional[Ahead] = None,
                       following: Optional[Point] = None) -> dict:
    """:func:`measure_point`, tried up to :data:`ATTEMPTS` times; a failed record after that.

    Before each try any server that has exited is started again; before a retry all of
    them are (one may hang).  Only iperf3 failures are retried: an error of the network
    or of IPsec is not the point's and ends the sweep.
    """
    from experiments.iperf import IperfError
    from testbed.errors import one_line

    reasons = []
    for attempt in range(1, ATTEMPTS + 1):
        try:
            if attempt == 1:
                servers.start()
            else:
                servers.restart()
            record = measure_point(net, point, spec, servers, ahead, following)
            record.update(attempts=attempt, failed=False)
            return record
        except IperfError as e:
            reasons.append(one_line(e))
            log.warning("%s, attempt %d of %d: %s", point, attempt, ATTEMPTS, reasons[-1])
    return {**dataclasses.asdict(point), "duration_s": spec.duration_s, "omit_s": spec.omit_s,
            "goodput_mbps": None, "failed": True, "attempts": ATTEMPTS, "error": "; ".join(reasons),
            "emulation_limited": False, "time": now_iso()}


def run_sweep(spec: SweepSpec, run_dir: str, progress: Optional[Callable[[Point, Optional[dict], int, int], None]] = None,
              command_line: Optional[list[str]] = None, lock: bool = True) -> dict:
    """Measure every point of ``spec`` missing from ``run_dir``; returns counts.

    ``progress(point, record, done, total)`` is called before (record None) and after
    each point.  Needs root and, for IPsec profiles, a kernel with ESP.  With ``lock``
    the run directory is locked for the sweep (:func:`locked_run_dir`); pass False when
    the caller holds the lock already.
    """
    with locked_run_dir(run_dir) if lock else contextlib.nullcontext():
        return _run_sweep(spec, run_dir, progress, command_line)


def _run_sweep(spec: SweepSpec, run_dir: str, progress, command_line) -> dict:
    from experiments import iperf
    from testbed import kernel
    from topologies import build_spec
    from topologies.network import Network
    from topologies.shaping import ShapingSpec

    points = plan_points(spec)
    results_path, todo = pending(run_dir, points)
    meta_path = os.path.join(run_dir, "meta.json")
    meta = _read_json(meta_path)
    meta.update(machine_meta())
    meta.setdefault("runs", []).append({"command_line": command_line or sys.argv, "started": now_iso(),
                                        "points_planned": len(points), "points_missing": len(todo)})
    meta.update({"command_line": command_line or sys.argv, "sweep": spec.to_json(),
                 "started": meta.get("started") or now_iso()})
    _write_json(meta_path, meta)
    measured = failed = 0
    base = len(points) - len(todo)
    backend = meta["backend"]
    try:
        with open_results(results_path) as out:
            rates = [float(r) for r in spec.rates_mbit if any(p.rate_mbit == float(r) for p in todo)]
            if rates:
                topo = build_spec(spec.topology, clients=spec.clients, mtu=spec.mtu, pmtu=spec.pmtu)
                ordered = [p for rate in rates for p in todo if p.rate_mbit == rate]
                with Network(topo, shaping=ShapingSpec(rate_mbit=rates[0])) as net, \
                        iperf.Servers(flows_of(net, spec.ip_versions[0])) as servers:
                    current = "none"
                    ahead = Ahead(net, spec, servers)
                    try:
                        for i, point in enumerate(ordered):
                            if i and point.rate_mbit != ordered[i - 1].rate_mbit:
                                net.reshape(ShapingSpec(rate_mbit=point.rate_mbit))
                            current = switch_ipsec(net, current, point.profile, spec.mode, spec.ip_versions)
                            if progress:
                                progress(point, None, base + measured, len(points))
                            following = ordered[i + 1] if i + 1 < len(ordered) else None
                            record = measure_with_retry(net, point, spec, servers, ahead, following)
                            record.update(backend=backend, kernel_release=platform.release())
                            append(out, record)
                            measured += 1
                            failed += record["failed"]
                            if progress:
                                progress(point, record, base + measured, len(points))
                    finally:
                        ahead.close()
                    if ahead.killed:
                        log.info("%d time(s) the next point's clients were not ready within a warm-up", ahead.killed)
    finally:
        meta = _read_json(meta_path)
        meta["runs"][-1].update(finished=now_iso(), points_measured=measured, points_failed=failed)
        meta["finished"] = now_iso()
        meta["complete"] = is_complete(run_dir, spec)
        _write_json(meta_path, meta)
    return {"planned": len(points), "already": len(points) - len(todo), "measured": measured,
            "failed": failed, "in_uml": kernel.in_uml()}


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
