"""Proof of the bisect: a kernel history with one commit that makes ESP costlier, found by `regress --bisect`.

    sudo ipsec-testbed bench bisect                         # 16 commits, the slow one at 11; then none slow
    sudo ipsec-testbed bench bisect --slow-commit 5 --extra-iterations 3000
    sudo ipsec-testbed bench bisect --kernel qemu           # built for the counted backend: about +1 %, counted

Makes a git history on Debian's linux-source-6.1 (the recipe's source): a first commit of the whole
tree, then, on two branches, ``--commits`` commits that each change one file of net/ (a comment: one
object to compile again, as a kernel developer's commits do); on branch ``slow`` commit ``--slow-commit`` also adds
``--extra-iterations`` iterations of a small loop to every ESP packet's way out (``esp_output`` in
net/ipv4/esp4.c: about 5 % more CPU per packet with the default).  Then runs
``ipsec-testbed regress --bisect FIRST LAST --tree HISTORY`` (the detect suite, paired, 12 windows
per kernel) and prints what it named, in how many steps and minutes, builds included, against the
targets (the slow commit, at most 5 steps, at most 20 minutes on 2 CPUs).  Then branch ``none``, the
same commits without the loop, bisected again: it must end "no regression".  With ``--kernel qemu`` every commit
is built for the counted backend (x86-64) and judged in instructions per packet on the counted suite, and the
loop is short (90 iterations, about 1 % of an ESP packet's instructions).

The history and the bisects' run directories are kept under --out.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time

from experiments.benchmark import Benchmark, front_door, option
from experiments.bisection import STEPS_FILE, Step
from testbed import kernelbuild

#: The files the commits touch, one each, in turn: net/ files a build compiles for the testbed's kernel.
FILES = ("net/ipv4/ip_output.c", "net/ipv4/tcp_output.c", "net/core/dev.c", "net/ipv4/route.c",
         "net/xfrm/xfrm_output.c", "net/ipv4/udp.c", "net/ipv6/ip6_output.c", "net/core/skbuff.c",
         "net/ipv4/tcp_input.c", "net/xfrm/xfrm_state.c", "net/ipv4/ip_input.c", "net/ipv6/route.c",
         "net/core/sock.c", "net/xfrm/xfrm_policy.c", "net/ipv4/tcp_ipv4.c", "net/ipv6/tcp_ipv6.c")
ESP = "net/ipv4/esp4.c"
#: Debian's source of the recipe's kernel, where the histories and patches start.
TARBALL = "/usr/src/linux-source-6.1.tar.xz"
GIT_ENV = {"GIT_AUTHOR_NAME": "ipsec-testbed", "GIT_AUTHOR_EMAIL": "bench@localhost",
           "GIT_COMMITTER_NAME": "ipsec-testbed", "GIT_COMMITTER_EMAIL": "bench@localhost"}


def git(tree: str, *args: str) -> str:
    return subprocess.run(["git", "-C", tree, *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def slow_loop(iterations: int, way: str = "out") -> str:
    return (f"\t{{\t/* ipsec-testbed bench bisect: extra work on every ESP packet's way {way} */\n"
            "\t\tvolatile u32 itb_sum = 0;\n\t\tint itb_i;\n\n"
            f"\t\tfor (itb_i = 0; itb_i < {iterations}; itb_i++)\n"
            "\t\t\titb_sum += itb_i * 2654435761u;\n\t}\n")


def with_loop(text: str, function: str, iterations: int, way: str = "out") -> str:
    """esp4.c's ``text`` with :func:`slow_loop` as the first statement of ``function`` (``esp_output``, the way
    out; ``esp_input``, the way in) after its declarations; ValueError where there is no such function."""
    anchor = re.compile(rf"((?:static )?int {function}\(struct xfrm_state \*x, struct sk_buff \*skb\)\n\{{\n"
                        r"(?:\t[^\n]*;\n)+)")
    text, n = anchor.subn(lambda m: m.group(1) + slow_loop(iterations, way), text, count=1)
    if n != 1:
        raise ValueError(f"cannot find {function}()'s declarations in {ESP}")
    return text


def source_tarball() -> str:
    """:data:`TARBALL`, installed (with the recipe's kernel built) where it is not yet."""
    if not os.path.exists(TARBALL):
        kernelbuild.build("recipe")  # installs linux-source-6.1 (and builds the recipe's kernel)
    return TARBALL


def make_history(out: str, commits: int, slow: int, iterations: int) -> tuple[str, dict[str, list[str]]]:
    """One repository under ``out/linux`` with two branches from the same first commit: ``slow`` (commit
    ``slow`` adds the loop) and ``none`` (the same commits without it).  Returns (tree, {branch: [first,
    c1, ..., cN]}): both bisects build in one kept tree, the second only what its commits change."""
    tree = os.path.join(out, "linux")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    tarball = source_tarball()
    t0 = time.monotonic()
    subprocess.run(["tar", "-xf", tarball, "-C", tree, "--strip-components=1"], check=True)
    git(tree, "init", "-q")
    git(tree, "add", "-A", "-f")  # Debian's source ignores everything (.gitignore: /*): every file, regardless
    git(tree, "commit", "-q", "-m", "linux 6.1.192 (Debian's linux-source-6.1)")
    first = git(tree, "rev-parse", "HEAD")
    branches = {}
    for branch in ("slow", "none"):
        git(tree, "checkout", "-q", "-b", branch, first)
        shas = [first]
        for i in range(1, commits + 1):
            path = os.path.join(tree, FILES[(i - 1) % len(FILES)])
            with open(path, "a") as f:
                f.write(f"/* ipsec-testbed bench bisect: commit {i} */\n")
            subject = f"commit {i}: a comment in {FILES[(i - 1) % len(FILES)]}"
            if branch == "slow" and i == slow:
                with open(os.path.join(tree, ESP)) as f:
                    text = f.read()
                try:
                    text = with_loop(text, "esp_output", iterations)
                except ValueError as e:
                    raise SystemExit(f"bisect: {e}") from None
                with open(os.path.join(tree, ESP), "w") as f:
                    f.write(text)
                subject += f", and {iterations} loop iterations in esp_output (the slow commit)"
            git(tree, "commit", "-q", "-a", "-m", subject)
            shas.append(git(tree, "rev-parse", "HEAD"))
        branches[branch] = shas
    print(f"history {tree}: branches slow and none of {commits} commits each on one first commit, "
          f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return tree, branches


#: Per backend: the suite a bisect judges on, its windows per kernel, the slow commit's loop iterations.
ON = {"uml": ("detect", 12, 2700), "qemu": ("counted", 8, 90)}
BRANCHES = ("slow", "none")


@dataclasses.dataclass(frozen=True)
class Options:
    """The history to make and how to bisect it; checked on construction, the backend's defaults filled in."""

    commits: int = option(16, "commits after the first")
    slow_commit: int = option(11, "the commit that makes ESP costlier", metavar="K")
    kernel: str = option("uml", "where the commits run: uml (CPU time, the detect suite) or qemu (built for the "
                         "counted backend, instructions, the counted suite)", choices=tuple(ON))
    extra_iterations: int | None = option(None, "the slow commit's loop iterations per ESP packet (default: 2700 in "
                                          "UML, about 5 % of its CPU time; 90 on qemu, about 1 % of its "
                                          "instructions)", metavar="N")
    repetitions: int | None = option(None, "windows per kernel of every paired A/B (default: 12 in UML, 8 on qemu)",
                                     metavar="N")
    out: str | None = option(None, "where the histories and the bisects go (default: runs/<date>-bench-bisect)")
    only: str | None = option(None, "run one of the two bisects", choices=BRANCHES)

    def __post_init__(self) -> None:
        if not 1 <= self.slow_commit <= self.commits <= len(FILES):
            raise ValueError(f"--slow-commit must be in 1..--commits, and --commits at most {len(FILES)}, not "
                             f"{self.slow_commit} and {self.commits}")
        if self.kernel not in ON:
            raise ValueError(f"--kernel must be one of {', '.join(ON)}, not {self.kernel!r}")
        _, windows, iterations = ON[self.kernel]
        for name, default in (("repetitions", windows), ("extra_iterations", iterations)):
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, default)  # the backend's: see the help
            elif value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, not {value}")


@dataclasses.dataclass(frozen=True)
class Bisected:
    """One bisect of one branch: its commits (the first, then 1..N), regress's exit status, its minutes, and every
    line of its log (the confirming A/B and the steps)."""

    branch: str
    shas: tuple[str, ...]
    rc: int
    seconds: float
    log: tuple[Step, ...]
    run_dir: str

    @property
    def steps(self) -> list[Step]:
        return [s for s in self.log if s.kind == "step"]

    @property
    def confirm(self) -> Step | None:
        return next((s for s in self.log if s.kind == "confirm"), None)

    @property
    def builds_s(self) -> float:
        return sum(s.build_s for s in self.log)

    @property
    def right(self) -> bool:
        """What the bisect must say: a regression (exit 1) on ``slow``, none (exit 0) on ``none``."""
        return self.rc == (1 if self.branch == "slow" else 0)

    def to_json(self) -> dict:
        """As results.json keeps it."""
        return {"rc": self.rc, "seconds": self.seconds, "steps": len(self.steps), "builds_s": self.builds_s,
                "confirm": self.confirm.to_json() if self.confirm else None, "run_dir": self.run_dir}


@dataclasses.dataclass(frozen=True)
class Result:
    """The bisects that ran, ``slow`` first."""

    bisects: tuple[Bisected, ...]


def bisect(tree: str, shas: tuple[str, ...], out: str, repetitions: int, label: str, kernel: str = "uml"
           ) -> Bisected:
    """``regress --bisect`` from the first of ``shas`` to the last, in ``tree``, into ``out/bisect-LABEL``."""
    run_dir = os.path.join(out, f"bisect-{label}")
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [*front_door(), "regress", "--bisect", shas[0], shas[-1], "--tree", tree, "--suite", ON[kernel][0],
           "--repetitions", str(repetitions), "--out", run_dir, "--kernel", kernel]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    log: list[Step] = []
    if os.path.exists(os.path.join(run_dir, STEPS_FILE)):  # not where regress failed before its first step
        with open(os.path.join(run_dir, STEPS_FILE)) as f:
            log = [Step(**json.loads(line)) for line in f if line.strip()]
    return Bisected(label, shas, rc, seconds, tuple(log), run_dir)


def run(args: Options) -> Result:
    """The history made, then each branch bisected; results.json under ``args.out``."""
    tree, branches = make_history(args.out, args.commits, args.slow_commit, args.extra_iterations)
    done = tuple(bisect(tree, tuple(branches[kind]), args.out, args.repetitions, kind, args.kernel)
                 for kind in BRANCHES if not args.only or kind == args.only)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({b.branch: b.to_json() for b in done}, f, indent=1)
    return Result(done)


def ratio(s: Step | None) -> str:
    """A step's B/A with its interval ("-" where it has none: a commit that did not build, no confirm)."""
    if s is None or s.ratio is None:
        return "-"
    return f"{s.ratio:.3f} ({s.low:.3f}..{s.high:.3f})"


def page(args: Options, result: Result) -> str:
    """What each bisect named, in how many steps and minutes, against the targets."""
    lines = []
    for b in result.bisects:
        if b.branch == "slow":
            slow = b.shas[args.slow_commit]
            found = [s.commit for s in b.steps if s.verdict == "bad"]
            first = min(found, key=b.shas.index) if found else None
            right = b.right and first == slow
            commits = len({s.commit for s in b.steps})
            lines.append(f"\nslow commit {args.slow_commit} ({slow[:12]}): bisect exit {b.rc}, named "
                         f"{first[:12] if first else 'nothing'} ({'right' if right else 'WRONG'}); confirm B/A "
                         f"{ratio(b.confirm)}; {commits} commits stepped on, {len(b.steps)} paired A/Bs for them (an "
                         f"unclear one is measured again), with the confirm {commits + 1} (target <= 5); "
                         f"{b.seconds / 60:.1f} min (target <= 20), the steps' builds {b.builds_s / 60:.1f} min of it")
            lines += [f"  step {s.commit[:12]} {s.verdict:8s} B/A {ratio(s)} build {s.build_s:.0f} s measure "
                      f"{s.measure_s:.0f} s" for s in b.steps]
        else:
            lines.append(f"\nno slow commit: bisect exit {b.rc} ({'no regression, right' if b.right else 'WRONG'}); "
                         f"confirm B/A {ratio(b.confirm)}; {b.seconds / 60:.1f} min")
    return "\n".join(lines)


BENCHMARK = Benchmark("bisect", Options, run, page, root="kernel builds' packages, namespaces, guests",
                      status=lambda result: 0 if all(b.right for b in result.bisects) else 1)
