"""How fast SAs and policies go in and out of the kernel: the netlink layer versus `ip xfrm`.

    sudo ipsec-testbed bench xfrm_install_rate [--pairs 1000] [--kernel auto|host|uml]

For ``--pairs N`` the workload is N SA pairs in transport mode, each pair with its own
/32 selectors from the benchmarking range 198.18.0.0/15 (RFC 2544), as one host sees
them::

    pair i:  198.18.x.y (this host)  <== ESP, reqid i+1 ==>  198.19.x.y (its peer)
             SA  out  198.18.x.y -> 198.19.x.y  spi 0x10000+2i
             SA  in   198.19.x.y -> 198.18.x.y  spi 0x10000+2i+1
             policy out  198.18.x.y/32 -> 198.19.x.y/32  tmpl esp transport reqid i+1
             policy in   198.19.x.y/32 -> 198.18.x.y/32  tmpl esp transport reqid i+1

that is 4N adds (all SAs, then all policies, as ``XfrmSocket.install`` orders them)
and 4N deletes (all policies, then all SAs, as ``ipsec.plan.remove_association``
does): 8N operations.  Each method runs in a fresh namespace ``itb-<run>-bench-*``, all three on
the same kernel in one run:

- ``netlink``: the testbed's layer, one :class:`ipsec.xfrm.XfrmSocket` per phase (opening
  it is timed); the adds are one ``install()`` call (all-or-nothing), the deletes one
  ``remove()`` call; both send 64 requests per datagram and learn each one's outcome
  (see :mod:`ipsec.xfrm.batch`).
- ``ip, 1 process/op``: ``ip -n NS xfrm state|policy add|delete ...``, one process per
  operation: what a shell script does, and what the acceptance target (netlink at
  least 20x faster) compares.
- ``ip -batch``: the same lines fed to one ``ip -n NS -batch -`` for the adds and one
  for the deletes: iproute2 at its fastest, one request and its ack at a time.

Two targets, each printed with its verdict: the netlink layer at least 20x one ``ip``
process per operation, and at least 2x ``ip -batch``.

Sampling: 8N processes are slow inside User-Mode Linux (5-14 processes/s measured on
the project's 2-CPU machines; a full 1000-pair run was still in its delete phase after
25 minutes), so by default the per-process method times only the first
``--ip-sample`` pairs (100), in a namespace that already holds the other N-K pairs
(installed and removed untimed over netlink, so every timed operation meets kernel
tables of the full size), and its rate stands for all N pairs.  The report says so in
a line starting ``SAMPLED:``.  ``--ip-sample all`` times every operation.

After each phase ``ip xfrm state count``/``policy count`` and the ``ip xfrm state``/
``policy`` listings (iproute2: a tool independent of the netlink layer) must show
exactly the planned SAs (SPIs, addresses, algorithm, keys) and policies, then nothing;
otherwise the run fails (with a sample: all N pairs after the adds, the N-K untimed ones
after the deletes).  Modules and the ``ip`` binary are warmed up before timing.

Keys come from :func:`ipsec.sa.random_key` and are never printed: ``ip xfrm state``
output is parsed, not shown, and failing commands are reported with keys redacted.
The per-process method passes keys on ``ip``'s command line (inside a throw-away
namespace, with throw-away keys); ``ip -batch`` reads them from a pipe.

Exit status 0 whenever the measurement completed, target met or not; 1 on errors; 125
when the User-Mode Linux guest could not run or died.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from experiments.benchmark import Benchmark, option, running_on
from experiments.job import KernelChoice
from ipsec.algorithms import get_algorithm
from ipsec.sa import PolicySpec, SASpec, SelectorSpec, TemplateSpec, random_key
from testbed import names, netns
from testbed.capabilities import ESP_NEEDS, Needs

log = logging.getLogger("xfrm_install_rate")

TARGET_RATIO = 20.0
#: ... and at least this many times `ip -batch` (issue 30: batched requests, gathered acks).
TARGET_BATCH_RATIO = 2.0
#: This host's addresses come from the first half of 198.18.0.0/15, the peers' from the second.
LOCAL_BASE = ipaddress.IPv4Address("198.18.0.0")
PEER_BASE = ipaddress.IPv4Address("198.19.0.0")
MAX_PAIRS = 65534  # host numbers 1..65534 in each /16
FIRST_SPI = 0x10000
#: ``--algorithm`` choices: (ESP aead, crypt, auth) catalog names.
ALGORITHMS: dict[str, tuple[str | None, str | None, str | None]] = {
    "aes-gcm-256": ("aes-gcm-256", None, None),
    "aes-cbc-hmac-sha1": (None, "aes-cbc", "hmac-sha1-96"),
}
PROCESS_TIMEOUT_S = 120.0
#: Pairs timed for `ip xfrm` one process per operation by default (see --ip-sample).
DEFAULT_IP_SAMPLE = 100


class BenchError(RuntimeError):
    """The benchmark could not measure: a command failed or the kernel state is wrong."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What to measure; checked on construction."""

    pairs: int = option(1000, f"SA pairs, 1..{MAX_PAIRS}", metavar="N")
    algorithm: str = option("aes-gcm-256", "ESP transform of every SA", choices=tuple(ALGORITHMS))
    ip_sample: str = option(str(DEFAULT_IP_SAMPLE), "time `ip xfrm` one process per operation on the first K pairs "
                            "only, with the other N-K installed untimed, and take its rate from them: it spawns 8 "
                            "processes per pair, and inside UML 1000 pairs take 15-30 minutes; 'all' times all N",
                            metavar="K|all")
    no_batch: bool = option(False, "leave out the ip -batch row (and its target)")
    verbose: bool = option(False, "log what is being done", flag=("-v", "--verbose"))
    kernel: KernelChoice = KernelChoice()

    def __post_init__(self) -> None:
        if not 1 <= self.pairs <= MAX_PAIRS:
            raise ValueError(f"--pairs must be in 1..{MAX_PAIRS}, not {self.pairs}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, not {self.algorithm!r}")
        if self.ip_sample != "all" and not (self.ip_sample.isdigit() and int(self.ip_sample) >= 1):
            raise ValueError(f"--ip-sample must be a number of pairs (at least 1) or 'all', not {self.ip_sample!r}")

    @property
    def sample(self) -> int | None:
        """Pairs the per-process method times (None: all)."""
        return None if self.ip_sample == "all" else int(self.ip_sample)


# ---------------------------------------------------------------------------------------
# Workload (specs; pure but for fresh keys)
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Workload:
    """The SAs and policies of ``pairs`` SA pairs, pair by pair (out then in)."""

    pairs: int
    sas: tuple[SASpec, ...]
    policies: tuple[PolicySpec, ...]

    @property
    def adds(self) -> int:
        return len(self.sas) + len(self.policies)

    @property
    def operations(self) -> int:
        """Adds plus deletes."""
        return 2 * self.adds

    def first(self, pairs: int) -> Workload:
        """The first ``pairs`` pairs of this workload (the same SAs, keys and policies)."""
        return Workload(pairs, self.sas[:2 * pairs], self.policies[:2 * pairs])

    def rest(self, pairs: int) -> Workload:
        """Every pair after the first ``pairs``."""
        return Workload(self.pairs - pairs, self.sas[2 * pairs:], self.policies[2 * pairs:])


def plan_workload(pairs: int, algorithm: str) -> Workload:
    """N SA pairs with their out/in policies, as in the module docstring."""
    if not 1 <= pairs <= MAX_PAIRS:
        raise ValueError(f"pairs must be in 1..{MAX_PAIRS}, not {pairs!r}")
    aead_name, crypt_name, auth_name = ALGORITHMS[algorithm]
    sas: list[SASpec] = []
    policies: list[PolicySpec] = []
    for i in range(pairs):
        local, peer = str(LOCAL_BASE + i + 1), str(PEER_BASE + i + 1)
        reqid = i + 1
        for n, (src, dst) in enumerate(((local, peer), (peer, local))):
            base = dict(src=src, dst=dst, proto="esp", spi=FIRST_SPI + 2 * i + n,
                        mode="transport", reqid=reqid)
            if aead_name:
                aead = get_algorithm(aead_name)
                sas.append(SASpec(**base, aead=aead, aead_key=random_key(aead)))
            else:
                crypt, auth = get_algorithm(crypt_name), get_algorithm(auth_name)
                sas.append(SASpec(**base, crypt=crypt, crypt_key=random_key(crypt, 128),
                                  auth=auth, auth_key=random_key(auth)))
        template = (TemplateSpec("esp", "transport", reqid),)
        policies.append(PolicySpec(SelectorSpec(local, peer), "out", templates=template))
        policies.append(PolicySpec(SelectorSpec(peer, local), "in", templates=template))
    return Workload(pairs, tuple(sas), tuple(policies))


# ---------------------------------------------------------------------------------------
# The same operations as `ip xfrm` arguments (pure)
# ---------------------------------------------------------------------------------------
def ip_sa_add_args(sa: SASpec) -> list[str]:
    """``xfrm state add ...`` for ``sa``: what XfrmSocket.add_sa sends (see tests/unit)."""
    args = ["xfrm", "state", "add", "src", sa.src, "dst", sa.dst, "proto", sa.proto,
            "spi", f"{sa.spi:#010x}", "reqid", str(sa.reqid), "mode", sa.mode,
            "replay-window", str(sa.replay_window)]
    if sa.aead is not None:
        args += ["aead", sa.aead.kernel_name, "0x" + sa.aead_key.hex(), str(sa.aead_icv_bits)]
    if sa.crypt is not None:
        args += ["enc", sa.crypt.kernel_name, "0x" + sa.crypt_key.hex()]
    if sa.auth is not None:
        args += ["auth-trunc", sa.auth.kernel_name, "0x" + sa.auth_key.hex(), str(sa.auth.icv_bits)]
    return args


def ip_sa_del_args(sa: SASpec) -> list[str]:
    """``xfrm state delete ...``: what XfrmSocket.del_sa(dst, spi, proto) sends."""
    return ["xfrm", "state", "delete", "dst", sa.dst, "proto", sa.proto, "spi", f"{sa.spi:#010x}"]


def ip_policy_add_args(policy: PolicySpec) -> list[str]:
    """``xfrm policy add ...`` for a transport-mode policy of this workload."""
    args = ["xfrm", "policy", "add", "src", policy.selector.src, "dst", policy.selector.dst,
            "dir", policy.direction, "priority", str(policy.priority)]
    for t in policy.templates:
        args += ["tmpl", "proto", t.proto, "reqid", str(t.reqid), "mode", t.mode]
    return args


def ip_policy_del_args(policy: PolicySpec) -> list[str]:
    """``xfrm policy delete ...``: what XfrmSocket.del_policy(selector, direction) sends."""
    return ["xfrm", "policy", "delete", "src", policy.selector.src, "dst", policy.selector.dst,
            "dir", policy.direction]


def ip_add_lines(w: Workload) -> list[list[str]]:
    return [ip_sa_add_args(sa) for sa in w.sas] + [ip_policy_add_args(p) for p in w.policies]


def ip_del_lines(w: Workload) -> list[list[str]]:
    return [ip_policy_del_args(p) for p in w.policies] + [ip_sa_del_args(sa) for sa in w.sas]


def redact(args: Sequence[str]) -> str:
    """A command line for messages, with every key (the word after an algorithm name) replaced."""
    return " ".join("<key>" if i >= 2 and args[i - 2] in ("aead", "enc", "auth-trunc") else a
                    for i, a in enumerate(args))


# ---------------------------------------------------------------------------------------
# Independent check with iproute2 (parsers are pure)
# ---------------------------------------------------------------------------------------
def parse_state_count(text: str) -> int:
    """The SA count from ``ip xfrm state count`` ("SAD count 2000")."""
    m = re.search(r"SAD count (\d+)", text)
    if not m:
        raise BenchError(f"cannot read `ip xfrm state count` output: {text.strip()!r}")
    return int(m.group(1))


def parse_policy_count(text: str) -> dict[str, int]:
    """{"in", "out", "fwd": count} from ``ip xfrm policy count`` ("SPD IN  1 OUT 1 FWD 0")."""
    m = re.search(r"SPD IN\s+(\d+)\s+OUT\s+(\d+)\s+FWD\s+(\d+)", text)
    if not m:
        raise BenchError(f"cannot read `ip xfrm policy count` output: {text.strip()!r}")
    return dict(zip(("in", "out", "fwd"), map(int, m.groups()), strict=True))


def parse_state_listing(text: str) -> dict[int, tuple[str, str, str, str]]:
    """{spi: (src, dst, algorithm names, key hex)} from ``ip xfrm state`` (keys stay in memory)."""
    out: dict[int, tuple[str, str, str, str]] = {}
    for block in re.split(r"\n(?=src )", text.strip()):
        if not block:
            continue
        head = re.match(r"src (\S+) dst (\S+)\n\tproto (\S+) spi 0x([0-9a-f]+)", block)
        if not head:
            raise BenchError("cannot read an `ip xfrm state` entry (output not shown: it holds keys)")
        algs = re.findall(r"^\t(aead|enc|auth-trunc) (\S+) 0x([0-9a-f]+)", block, re.M)
        spi = int(head.group(4), 16)
        if spi in out:
            raise BenchError(f"`ip xfrm state` lists SPI {spi:#x} twice")
        out[spi] = (head.group(1), head.group(2), ",".join(n for _, n, _ in sorted(algs)),
                    "".join(k for _, _, k in sorted(algs)))
    return out


def parse_policy_listing(text: str) -> set[tuple[str, str, str]]:
    """{(src, dst, dir)} from ``ip xfrm policy``."""
    return set(re.findall(r"^src (\S+) dst (\S+) *\n\tdir (\S+)", text, re.M))


def expected_states(w: Workload) -> dict[int, tuple[str, str, str, str]]:
    out = {}
    for sa in w.sas:
        algs = []
        if sa.aead is not None:
            algs.append(("aead", sa.aead.kernel_name, sa.aead_key.hex()))
        if sa.crypt is not None:
            algs.append(("enc", sa.crypt.kernel_name, sa.crypt_key.hex()))
        if sa.auth is not None:
            algs.append(("auth-trunc", sa.auth.kernel_name, sa.auth_key.hex()))
        algs.sort()
        out[sa.spi] = (sa.src, sa.dst, ",".join(n for _, n, _ in algs), "".join(k for _, _, k in algs))
    return out


def expected_policies(w: Workload) -> set[tuple[str, str, str]]:
    return {(p.selector.src, p.selector.dst, p.direction) for p in w.policies}


def ip(ns: str, *args: str) -> str:
    """Run ``ip -n NS ARGS`` for a check; its output (never printed if it holds keys)."""
    r = subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    if r.returncode != 0:
        raise BenchError(f"`ip -n {ns} {' '.join(args)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def verify(ns: str, method: str, phase: str, w: Workload | None) -> None:
    """Check with iproute2 that ``ns`` holds exactly ``w`` (None: nothing); raise BenchError otherwise."""
    want_sas = expected_states(w) if w else {}
    want_pols = expected_policies(w) if w else set()
    where = f"{method}, after the {phase} phase: namespace {ns}"
    count = parse_state_count(ip(ns, "xfrm", "state", "count"))
    pcount = parse_policy_count(ip(ns, "xfrm", "policy", "count"))
    want_pcount = {"in": len(want_pols) // 2, "out": len(want_pols) // 2, "fwd": 0}
    if count != len(want_sas) or pcount != want_pcount:
        raise BenchError(f"{where} holds {count} SAs and policies {pcount} by `ip xfrm ... count`; "
                         f"expected {len(want_sas)} SAs and policies {want_pcount}")
    have_sas = parse_state_listing(ip(ns, "xfrm", "state"))
    if have_sas != want_sas:
        missing = sorted(set(want_sas) - set(have_sas))
        extra = sorted(set(have_sas) - set(want_sas))
        differ = sorted(s for s in set(want_sas) & set(have_sas) if want_sas[s] != have_sas[s])

        def show(spis: list[int]) -> str:
            return ", ".join(f"{s:#x}" for s in spis[:5]) + (" ..." if len(spis) > 5 else "")

        raise BenchError(f"{where}: `ip xfrm state` differs from the plan: {len(missing)} SPIs missing "
                         f"({show(missing)}), {len(extra)} unexpected ({show(extra)}), {len(differ)} with "
                         f"other addresses, algorithms or keys ({show(differ)})")
    have_pols = parse_policy_listing(ip(ns, "xfrm", "policy"))
    if have_pols != want_pols:
        missing_p, extra_p = sorted(want_pols - have_pols), sorted(have_pols - want_pols)
        raise BenchError(f"{where}: `ip xfrm policy` differs from the plan: {len(missing_p)} missing "
                         f"{missing_p[:3]}, {len(extra_p)} unexpected {extra_p[:3]}")
    log.info("%s: %d SAs and %d policies, as planned", where, len(want_sas), len(want_pols))


# ---------------------------------------------------------------------------------------
# Methods (apply)
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Row:
    """One method's figures; ``pairs`` is what was measured, ``of_pairs`` the workload size."""

    method: str
    how: str
    pairs: int
    of_pairs: int
    add_s: float
    del_s: float

    @property
    def operations(self) -> int:
        return 8 * self.pairs

    @property
    def rate(self) -> float:
        """Operations (adds and deletes) per second."""
        return self.operations / (self.add_s + self.del_s)

    @property
    def sampled(self) -> bool:
        return self.pairs < self.of_pairs



# One phase of one method: install (or remove) the whole workload in ``ns``; its seconds.
Phase = Callable[[str, Workload], float]


def netlink_add(ns: str, w: Workload) -> float:
    """One XfrmSocket (opening it is timed), one ``install()`` call: SAs, then policies."""
    from ipsec.xfrm import XfrmSocket

    t0 = time.perf_counter()
    with XfrmSocket(netns=ns) as xs:
        xs.install(w.sas, w.policies)
    return time.perf_counter() - t0


def netlink_delete(ns: str, w: Workload) -> float:
    """One XfrmSocket (opening it is timed), one ``remove()`` call: policies, then SAs."""
    from ipsec.xfrm import XfrmSocket

    t0 = time.perf_counter()
    with XfrmSocket(netns=ns) as xs:
        xs.remove(w.sas, w.policies)
    return time.perf_counter() - t0


def _ip_per_process(ns: str, lines: list[list[str]], label: str) -> float:
    started = time.monotonic()
    last = started
    t0 = time.perf_counter()
    for n, args in enumerate(lines, 1):
        r = subprocess.run(["ip", "-n", ns, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=PROCESS_TIMEOUT_S)
        if r.returncode != 0:
            raise BenchError(f"`ip -n {ns} {redact(args)}` failed ({r.returncode}): "
                             f"{r.stderr.decode(errors='replace').strip()}")
        now = time.monotonic()
        if now - last >= 30 and n < len(lines):  # UML spawns ~14 processes/s: show it is alive
            last = now
            print(f"  {label}: {n}/{len(lines)} after {now - started:.0f} s", file=sys.stderr, flush=True)
    return time.perf_counter() - t0


def ip_add(ns: str, w: Workload) -> float:
    """One ``ip -n NS xfrm state|policy add`` process per SA and per policy."""
    return _ip_per_process(ns, ip_add_lines(w), "ip xfrm adds")


def ip_delete(ns: str, w: Workload) -> float:
    """One ``ip -n NS xfrm policy|state delete`` process per policy and per SA."""
    return _ip_per_process(ns, ip_del_lines(w), "ip xfrm deletes")


def _ip_batch(ns: str, lines: list[list[str]]) -> float:
    text = "".join(" ".join(args) + "\n" for args in lines).encode()  # no argument holds a space
    t0 = time.perf_counter()
    r = subprocess.run(["ip", "-n", ns, "-batch", "-"], input=text, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=PROCESS_TIMEOUT_S * 10)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        # ip names the failing line ("Command failed -:17"); the input holds keys: not shown.
        raise BenchError(f"`ip -n {ns} -batch -` with {len(lines)} lines ({redact(lines[0][:3])} ...) "
                         f"failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()}")
    return seconds


def batch_add(ns: str, w: Workload) -> float:
    """All add lines through one ``ip -n NS -batch -`` process (keys through the pipe)."""
    return _ip_batch(ns, ip_add_lines(w))


def batch_delete(ns: str, w: Workload) -> float:
    """All delete lines through one ``ip -n NS -batch -`` process."""
    return _ip_batch(ns, ip_del_lines(w))


@dataclasses.dataclass(frozen=True)
class Method:
    label: str
    role: str  # namespace role: itb-<run>-bench-<role>
    how: str
    add: Phase
    delete: Phase


METHODS: dict[str, Method] = {
    "netlink": Method("netlink", "nl",
                      "ipsec.xfrm.XfrmSocket: install() for the adds, remove() for the deletes (one call "
                      "each, one socket, 64 requests per datagram, every failure reported per request)",
                      netlink_add, netlink_delete),
    "ip": Method("ip, 1 process/op", "ip",
                 "one `ip -n NS xfrm state|policy add|delete ...` process per operation",
                 ip_add, ip_delete),
    "batch": Method("ip -batch", "batch",
                    "one `ip -n NS -batch -` process for all adds, one for all deletes", batch_add, batch_delete),
}


def warm_up(run_id: str, w: Workload) -> None:
    """Load the ESP and crypto modules and page in the ip binary (hostfs is slow) before timing."""
    from ipsec.xfrm import XfrmSocket

    with netns.namespace(names.netns_name(run_id, "bench-warm")) as ns:
        with XfrmSocket(netns=ns) as xs:
            xs.add_sa(w.sas[0])
            xs.del_sa(w.sas[0].dst, w.sas[0].spi, w.sas[0].proto)
        subprocess.run(["ip", "-n", ns, *ip_sa_add_args(w.sas[1])], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=PROCESS_TIMEOUT_S)
        verify(ns, "warm-up", "add", Workload(1, w.sas[1:2], ()))


def measure(args: Options) -> list[Row]:
    """Every method in its own fresh namespace; kernel state checked after each phase (not timed).

    With a sample (``--ip-sample K`` < N) the per-process method times the first K pairs
    only, in a namespace that already holds the other N-K pairs, installed (and removed
    afterwards) untimed through the netlink layer: the sampled operations meet kernel
    tables of the full run's size, and the kernel must hold all N pairs after the adds.
    """
    if not shutil.which("ip"):
        raise BenchError("`ip` (iproute2) not found; it is one of the methods compared (apt: iproute2)")
    w = plan_workload(args.pairs, args.algorithm)
    run_id = names.new_run_id()
    log.info("run %s: %d pairs, %d operations per method", run_id, w.pairs, w.operations)
    warm_up(run_id, w)
    rows = []
    for key in ("netlink", "ip", "batch"):
        if key == "batch" and args.no_batch:
            continue
        method = METHODS[key]
        sample = min(args.sample or w.pairs, w.pairs) if key == "ip" else w.pairs
        work, filler = w.first(sample), w.rest(sample)
        print(f"measuring {method.label}: {work.pairs} pairs, {work.operations} operations"
              + (f" (sample; the other {filler.pairs} pairs installed untimed beforehand)" if filler.pairs else "")
              + " ...", file=sys.stderr, flush=True)
        with netns.namespace(names.netns_name(run_id, f"bench-{method.role}")) as ns:
            verify(ns, method.label, "start", None)
            if filler.pairs:
                netlink_add(ns, filler)
                verify(ns, method.label, "untimed filler", filler)
            add_s = method.add(ns, work)
            verify(ns, method.label, "add", w)
            del_s = method.delete(ns, work)
            verify(ns, method.label, "delete", filler if filler.pairs else None)
            if filler.pairs:
                netlink_delete(ns, filler)
                verify(ns, method.label, "untimed filler removal", None)
        rows.append(Row(method.label, method.how, work.pairs, w.pairs, add_s, del_s))
        print(f"  {method.label}: add {add_s:.2f} s, delete {del_s:.2f} s, {rows[-1].rate:,.1f} ops/s; "
              f"`ip xfrm` saw exactly the {2 * w.pairs} SAs and {2 * w.pairs} policies after the adds and "
              f"{2 * filler.pairs} of each after the deletes", file=sys.stderr, flush=True)
    return rows


@dataclasses.dataclass(frozen=True)
class Result:
    """Each method's row and the kernel they ran on; or why the run ended early (said on stderr as it ended)."""

    rows: tuple[Row, ...] = ()
    where: str = ""
    error: str = ""  # what stopped the measurement
    interrupted: bool = False

    @property
    def status(self) -> int:
        """0 whenever the measurement completed, target met or not; 1 on an error; 130 when interrupted."""
        return 130 if self.interrupted else 1 if self.error else 0


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
def page(args: Options, result: Result) -> str:
    """The table of rates, what each method is, the sample's extrapolation and the two targets' verdicts."""
    from rich.console import Console
    from rich.table import Table

    rows = result.rows
    if not rows:
        return ""
    netlink = next(r for r in rows if r.method == METHODS["netlink"].label)
    per_process = next(r for r in rows if r.method == METHODS["ip"].label)
    pairs = netlink.pairs
    t = Table(title=f"xfrm install/remove rate: {pairs} ESP SA pairs ({args.algorithm}, transport) + "
                    f"{2 * pairs} policies; {result.where}", title_justify="left")
    # Headers kept short: without a terminal rich draws 80 columns wide.
    for col in ("method", "pairs", "ops", "add s", "delete s", "ops/s", "netlink ÷ this"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        t.add_row(r.method, f"{r.pairs}/{r.of_pairs}" if r.sampled else str(r.pairs),
                  f"{r.operations:,}", f"{r.add_s:.2f}", f"{r.del_s:.2f}",
                  f"{r.rate:,.0f}", f"{netlink.rate / r.rate:.1f}x")
    console = Console()
    with console.capture() as table:
        console.print(t)
    lines = [table.get().rstrip("\n"),
             "ops = adds + deletes: per pair 2 SAs + 2 policies (out, in) added, then deleted; each method in "
             "a fresh namespace, checked after each phase (outside the timings) with `ip xfrm state|policy count` "
             "and the `ip xfrm state|policy` listings (SPIs, addresses, algorithm, keys, selectors)"]
    lines += [f"  {r.method}: {r.how}" for r in rows]
    if per_process.sampled:
        total = per_process.of_pairs * 8 / per_process.rate
        lines.append(f"SAMPLED: `ip xfrm` one process per operation was timed on the first {per_process.pairs} of "
                     f"{per_process.of_pairs} pairs ({per_process.operations:,} processes; the other "
                     f"{per_process.of_pairs - per_process.pairs} pairs were installed and removed untimed over "
                     f"netlink, so the tables had the full size); its rate is extrapolated to all "
                     f"{per_process.of_pairs} pairs: about {total:.0f} s for {per_process.of_pairs * 8:,} "
                     f"operations (--ip-sample all times them all)")
    ratio = netlink.rate / per_process.rate
    verdict = "MET" if ratio >= TARGET_RATIO else "NOT MET"
    lines.append(f"netlink layer vs one `ip xfrm` process per operation: {ratio:.1f}x faster "
                 f"({netlink.rate:,.0f} vs {per_process.rate:,.1f} ops/s); target >= {TARGET_RATIO:.0f}x: {verdict}")
    batch = next((r for r in rows if r.method == METHODS["batch"].label), None)
    if batch is not None:
        ratio = netlink.rate / batch.rate
        verdict = "MET" if ratio >= TARGET_BATCH_RATIO else "NOT MET"
        lines.append(f"netlink layer vs ip -batch: {ratio:.1f}x faster ({netlink.rate:,.0f} vs {batch.rate:,.0f} "
                     f"ops/s); target >= {TARGET_BATCH_RATIO:.0f}x: {verdict}")
    return "\n".join(lines)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the namespace context managers


def run(args: Options) -> Result:
    """What the benchmark measures, on the kernel it runs on; an error or an interrupt ends it with one line."""
    signal.signal(signal.SIGTERM, _terminate)
    where = running_on()
    try:
        rows = measure(args)
    except KeyboardInterrupt:
        print("xfrm_install_rate: interrupted", file=sys.stderr)
        return Result(where=where, interrupted=True)
    except Exception as e:
        from ipsec.xfrm import XfrmError

        if not isinstance(e, (BenchError, XfrmError, OSError, subprocess.SubprocessError, ValueError)):
            raise
        print(f"xfrm_install_rate: error: {e}", file=sys.stderr)
        return Result(where=where, error=str(e))
    return Result(tuple(rows), where)


def needs(args: Options) -> Needs:
    """ESP, whichever transform (--algorithm names a transform, not a profile): the host kernel runs it where
    it has ESP."""
    return ESP_NEEDS


BENCHMARK = Benchmark("xfrm_install_rate", Options, run, page, root="network namespaces, xfrm", needs=needs,
                      status=lambda result: result.status)
