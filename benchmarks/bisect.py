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

import argparse
import json
import os
import re
import shutil
import subprocess
import time

from benchmarks import _common
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
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return tree, branches


#: Per backend: the suite a bisect judges on, its windows per kernel, the slow commit's loop iterations.
ON = {"uml": ("detect", 12, 2700), "qemu": ("counted", 8, 90)}


def bisect(tree: str, shas: list[str], out: str, repetitions: int, label: str, kernel: str = "uml"
           ) -> tuple[int, float, dict]:
    run_dir = os.path.join(out, f"bisect-{label}")
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [*_common.front_door(), "regress", "--bisect", shas[0], shas[-1], "--tree", tree, "--suite", ON[kernel][0],
           "--repetitions", str(repetitions), "--out", run_dir, "--kernel", kernel]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    steps = []
    with open(os.path.join(run_dir, "bisect.jsonl")) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    return rc, seconds, {"steps": steps, "run_dir": run_dir}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commits", type=int, default=16, help="commits after the first (default: %(default)s)")
    p.add_argument("--slow-commit", type=int, default=11, metavar="K",
                   help="the commit that makes ESP costlier (default: %(default)s)")
    p.add_argument("--kernel", choices=tuple(ON), default="uml",
                   help="where the commits run: uml (CPU time, the detect suite) or qemu (built for the counted "
                   "backend, instructions, the counted suite) (default: %(default)s)")
    p.add_argument("--extra-iterations", type=int, default=None, metavar="N",
                   help="the slow commit's loop iterations per ESP packet (default: 2700 in UML, about 5 %% of its CPU "
                   "time; 90 on qemu, about 1 %% of its instructions)")
    p.add_argument("--repetitions", type=int, default=None, metavar="N",
                   help="windows per kernel of every paired A/B (default: 12 in UML, 8 on qemu)")
    p.add_argument("--out", default=None,
                   help="where the histories and the bisects go (default: runs/<date>-bench-bisect)")
    p.add_argument("--only", choices=("slow", "none"), help="run one of the two bisects")
    args = p.parse_args(argv)
    if not 1 <= args.slow_commit <= args.commits <= len(FILES):
        p.error(f"--slow-commit must be in 1..--commits, and --commits at most {len(FILES)}")
    _, windows, iterations = ON[args.kernel]
    args.repetitions = args.repetitions or windows
    args.extra_iterations = args.extra_iterations or iterations
    out = _common.root_out_dir("bisect", args.out, "kernel builds' packages, namespaces, guests")
    results = {}
    tree, branches = make_history(out, args.commits, args.slow_commit, args.extra_iterations)
    for kind in ("slow", "none"):
        if args.only and kind != args.only:
            continue
        shas = branches[kind]
        rc, seconds, data = bisect(tree, shas, out, args.repetitions, kind, args.kernel)
        steps = [s for s in data["steps"] if s["kind"] == "step"]
        confirm = next((s for s in data["steps"] if s["kind"] == "confirm"), None)
        builds = sum(s["build_s"] for s in data["steps"])
        results[kind] = {"rc": rc, "seconds": seconds, "steps": len(steps), "builds_s": builds,
                         "confirm": confirm, "run_dir": data["run_dir"]}
        if kind == "slow":
            found = [s["commit"] for s in steps if s["verdict"] == "bad"]
            first = min(found, key=shas.index) if found else None
            right = rc == 1 and first == shas[args.slow_commit]
            commits = len({s["commit"] for s in steps})
            print(f"\nslow commit {args.slow_commit} ({shas[args.slow_commit][:12]}): bisect exit {rc}, named "
                  f"{first[:12] if first else 'nothing'} ({'right' if right else 'WRONG'}); confirm B/A "
                  f"{confirm['ratio']:.3f} ({confirm['low']:.3f}..{confirm['high']:.3f}); {commits} commits stepped "
                  f"on, {len(steps)} paired A/Bs for them (an unclear one is measured again), with the confirm "
                  f"{commits + 1} (target <= 5); {seconds / 60:.1f} min (target <= 20), the steps' builds "
                  f"{builds / 60:.1f} min of it", flush=True)
            for s in steps:
                print(f"  step {s['commit'][:12]} {s['verdict']:8s} B/A {s['ratio']:.3f} ({s['low']:.3f}.."
                      f"{s['high']:.3f}) build {s['build_s']:.0f} s measure {s['measure_s']:.0f} s", flush=True)
        else:
            print(f"\nno slow commit: bisect exit {rc} ({'no regression, right' if rc == 0 else 'WRONG'}); confirm "
                  f"B/A {confirm['ratio']:.3f} ({confirm['low']:.3f}..{confirm['high']:.3f}); {seconds / 60:.1f} min",
                  flush=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    ok = (results.get("slow", {}).get("rc", 1) == 1) and (results.get("none", {}).get("rc", 0) == 0)
    return 0 if ok else 1
