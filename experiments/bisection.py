"""Which commit made kernel IPsec slower: a bisect whose every step is a paired A/B.

::

    confirm    GOOD against BAD, paired (regress --ab): BAD worse beyond the tolerance at 95 %?
               no -> "no regression", the end (exit 0)
    step       the commit halfway between the last good and the first bad one, built by the recipe
               (a kept tree: only what changed is compiled), then paired against GOOD:
                 good     its ratio's interval lies wholly on GOOD's side of halfway to BAD's ratio
                 bad      wholly on BAD's side
                 unclear  it straddles halfway: measured once more, then skipped (as git bisect skip)
                 failed   it did not build: skipped
    end        the first bad commit (its parent good), with its ratio and interval; or the range
               that skips left (exit 1 either way: a regression was found)

Every step is a line of ``RUN/bisect.jsonl`` (commit, subject, ratio and interval, verdict, build
and measure seconds), written as it ends: run the same command on the same directory and the bisect
goes on from there.  The decision rule is pure (:func:`classify`, :func:`next_commit`) and tested
with stand-ins for the builds and the measurements.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence

from testbed.rundir import atomic_write

GOOD, BAD, UNCLEAR, FAILED = "good", "bad", "unclear", "failed"
STEPS_FILE = "bisect.jsonl"
SETUP_FILE = "bisect.json"


class BisectError(RuntimeError):
    """A bisect that cannot start or go on: one line naming the input and what to do."""


@dataclasses.dataclass(frozen=True)
class Ratio:
    """A step's measurement: the metric of the step's kernel over GOOD's, with its two-sided 95 % interval, and
    whether the regression gate flagged the pair (what decides the confirming A/B)."""

    ratio: float
    low: float
    high: float
    regressed: bool = False


@dataclasses.dataclass(frozen=True)
class Step:
    """One line of the bisect's log."""

    kind: str        # confirm | step
    commit: str
    subject: str
    verdict: str     # good | bad | unclear | failed (a confirm: bad, or good for "no regression")
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    build_s: float = 0.0
    measure_s: float = 0.0
    note: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """The step as its line on the terminal."""
        value = (f"{self.ratio:.3f} ({self.low:.3f}..{self.high:.3f})" if self.ratio is not None else "-")
        return (f"{self.kind:7s} {self.commit[:12]} {self.verdict:8s} B/A {value:24s} build {self.build_s:4.0f} s, "
                f"measure {self.measure_s:4.0f} s  {self.subject[:60]}{f'  ({self.note})' if self.note else ''}")


def classify(r: Ratio, bad: Ratio) -> str:
    """good, bad or unclear: where ``r``'s interval lies against halfway between GOOD (1) and BAD's ratio.

    Pure.  A metric where higher is worse (a CPU cost) has BAD's ratio above 1; where lower is worse
    (goodput), below; either way the step is good only when its whole interval is on GOOD's side."""
    halfway = (1.0 + bad.ratio) / 2
    worse_up = bad.ratio > 1.0
    if (r.high < halfway) if worse_up else (r.low > halfway):
        return GOOD
    if (r.low > halfway) if worse_up else (r.high < halfway):
        return BAD
    return UNCLEAR


def bounds(commits: Sequence[str], steps: Sequence[Step]) -> tuple[int, int, set[int]]:
    """From the steps so far: the index of the last known good commit (-1: GOOD itself), of the first
    known bad one (the last index: BAD), and the indices skipped.  Pure."""
    where = {c: i for i, c in enumerate(commits)}
    good, bad, skipped = -1, len(commits) - 1, set()
    tries: dict[str, list[str]] = {}
    for s in steps:
        if s.kind != "step" or s.commit not in where:
            continue
        tries.setdefault(s.commit, []).append(s.verdict)
    for commit, verdicts in tries.items():
        i = where[commit]
        final = next((v for v in verdicts if v in (GOOD, BAD)), None)
        if final == GOOD:
            good = max(good, i)
        elif final == BAD:
            bad = min(bad, i)
        elif FAILED in verdicts or verdicts.count(UNCLEAR) >= 2:
            skipped.add(i)
    return good, bad, skipped


def next_commit(commits: Sequence[str], steps: Sequence[Step]) -> int | None:
    """The index of the commit to measure next, or None when the bisect is over.  Pure.

    The commit halfway between the last good and the first bad one; skipped commits are passed over
    for the nearest one that is not (as ``git bisect skip`` does); one measured unclear once is
    measured again before any other."""
    good, bad, skipped = bounds(commits, steps)
    unclear_once = [i for i, c in enumerate(commits) if good < i < bad and i not in skipped
                    and [s.verdict for s in steps if s.kind == "step" and s.commit == c] == [UNCLEAR]]
    if unclear_once:
        return unclear_once[0]
    candidates = [i for i in range(good + 1, bad) if i not in skipped]
    if not candidates:
        return None
    middle = (good + bad) / 2
    return min(candidates, key=lambda i: (abs(i - middle), i))


def result(commits: Sequence[str], steps: Sequence[Step]) -> tuple[str | None, list[str]]:
    """The first bad commit (None when skips leave a range), and the range of commits it may be. Pure."""
    good, bad, _skipped = bounds(commits, steps)
    suspects = list(commits[good + 1:bad + 1])
    return (suspects[0] if len(suspects) == 1 else None), suspects


# -- the git side ----------------------------------------------------------------------------------

def _git(tree: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", tree, *args], capture_output=True, text=True)
    if done.returncode:
        raise BisectError(f"git {' '.join(args)} in {tree}: {done.stderr.strip()[:200]}")
    return done.stdout.strip()


def commits_between(tree: str, good: str, bad: str) -> list[str]:
    """The commits after GOOD up to BAD, oldest first, on the paths from GOOD to BAD; BisectError when
    GOOD is not an ancestor of BAD or there is nothing between."""
    good_sha = _git(tree, "rev-parse", "--verify", f"{good}^{{commit}}")
    bad_sha = _git(tree, "rev-parse", "--verify", f"{bad}^{{commit}}")
    if subprocess.run(["git", "-C", tree, "merge-base", "--is-ancestor", good_sha, bad_sha]).returncode:
        raise BisectError(f"GOOD {good} is not an ancestor of BAD {bad} in {tree}: a bisect looks for the commit "
                          "between them that made the change (swap them, or name a GOOD that BAD contains)")
    commits = _git(tree, "rev-list", "--reverse", "--ancestry-path", f"{good_sha}..{bad_sha}").split()
    if not commits:
        raise BisectError(f"GOOD {good} and BAD {bad} are the same commit in {tree}")
    return commits


def subject(tree: str, commit: str) -> str:
    return _git(tree, "log", "-1", "--format=%s", commit)


# -- the run ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Bisect:
    """A bisect into ``out_dir``: ``build(commit)`` builds a commit's kernel (its name for the A/B),
    ``measure(name)`` pairs it with GOOD's and returns the :class:`Ratio`; both may raise."""

    tree: str
    good: str
    bad: str
    out_dir: str
    build: Callable[[str], str]
    measure: Callable[[str], Ratio]
    say: Callable[[str], None] = print
    commits: list[str] = dataclasses.field(default_factory=list)
    steps: list[Step] = dataclasses.field(default_factory=list)

    def load(self) -> None:
        """The setup and the steps a run before left in ``out_dir`` (resumed when they match)."""
        self.commits = commits_between(self.tree, self.good, self.bad)
        setup = {"tree": os.path.abspath(self.tree), "good": self.good, "bad": self.bad, "commits": self.commits}
        path = os.path.join(self.out_dir, SETUP_FILE)
        if os.path.exists(path):
            with open(path) as f:
                before = json.load(f)
            if before.get("commits") != self.commits or before.get("tree") != setup["tree"]:
                raise BisectError(f"{self.out_dir} holds a bisect of other commits ({before.get('good')}.."
                                  f"{before.get('bad')} in {before.get('tree')}): give another --out")
        os.makedirs(self.out_dir, exist_ok=True)
        atomic_write(path, json.dumps(setup, indent=1) + "\n")
        steps = os.path.join(self.out_dir, STEPS_FILE)
        if os.path.exists(steps):
            with open(steps) as f:
                self.steps = [Step(**json.loads(line)) for line in f if line.strip()]

    def _log(self, step: Step) -> Step:
        with open(os.path.join(self.out_dir, STEPS_FILE), "a") as f:
            f.write(json.dumps(step.to_json()) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.steps.append(step)
        self.say(step.line())
        return step

    def _run(self, kind: str, commit: str, bad_ratio: Ratio | None) -> Step:
        t0 = time.monotonic()
        try:
            name = self.build(commit)
        except Exception as e:  # noqa: BLE001 (a commit that does not build is skipped, as git bisect skip)
            return self._log(Step(kind, commit, subject(self.tree, commit), FAILED, build_s=time.monotonic() - t0,
                                  note=str(e).splitlines()[0][:160]))
        built = time.monotonic()
        r = self.measure(name)
        verdict = classify(r, bad_ratio) if bad_ratio else BAD
        return self._log(Step(kind, commit, subject(self.tree, commit), verdict, r.ratio, r.low, r.high,
                              build_s=built - t0, measure_s=time.monotonic() - built))

    def confirmed(self) -> Step | None:
        return next((s for s in self.steps if s.kind == "confirm"), None)

    def run(self) -> tuple[str | None, list[str]] | None:
        """Confirm, then step until one commit is left (or skips leave a range); None when BAD is not worse
        than GOOD (the confirming A/B did not flag it)."""
        confirm = self.confirmed()
        if confirm is None:
            self.say(f"confirming: {self.bad} against {self.good}, paired ({len(self.commits)} commits between)")
            t0 = time.monotonic()
            name = self.build(self.commits[-1])
            built = time.monotonic()
            r = self.measure(name)
            confirm = self._log(Step("confirm", self.commits[-1], subject(self.tree, self.commits[-1]),
                                     BAD if r.regressed else GOOD, r.ratio, r.low, r.high, built - t0,
                                     time.monotonic() - built))
        if confirm.verdict != BAD:
            return None
        bad_ratio = Ratio(confirm.ratio, confirm.low, confirm.high)
        while (i := next_commit(self.commits, self.steps)) is not None:
            good, bad, skipped = bounds(self.commits, self.steps)
            self.say(f"step: {bad - good - 1 - len([s for s in skipped if good < s < bad])} commits left between the "
                     f"last good and the first bad; measuring {self.commits[i][:12]}")
            self._run("step", self.commits[i], bad_ratio)
        return result(self.commits, self.steps)
