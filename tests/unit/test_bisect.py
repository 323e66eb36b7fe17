"""The bisect's logic with stand-in kernels and measurements: a real git history, no build, no guest."""
from __future__ import annotations

import json
import subprocess

import pytest

from experiments import bisection as bisect
from experiments.bisection import BAD, FAILED, GOOD, UNCLEAR, Bisect, BisectError, Ratio, Step, classify


def history(tmp_path, n: int = 16):
    """A git repository of ``n`` commits after a root; returns (tree, [root, c1, ..., cn])."""
    tree = tmp_path / "linux"
    tree.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}

    def git(*args):
        return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    git("init", "-q")
    shas = []
    for i in range(n + 1):
        (tree / "file").write_text(f"{i}\n")
        git("add", "file")
        git("commit", "-q", "-m", f"commit {i}")
        shas.append(git("rev-parse", "HEAD"))
    return str(tree), shas


def test_a_step_is_judged_against_halfway_to_bads_ratio_on_either_side():
    cost = Ratio(1.05, 1.04, 1.06)  # BAD costs 5 % more per packet
    assert classify(Ratio(1.001, 0.995, 1.007), cost) == GOOD
    assert classify(Ratio(1.049, 1.04, 1.058), cost) == BAD
    assert classify(Ratio(1.02, 1.01, 1.03), cost) == UNCLEAR  # straddles 1.025
    goodput = Ratio(0.95, 0.94, 0.96)  # lower is worse
    assert classify(Ratio(0.999, 0.99, 1.01), goodput) == GOOD
    assert classify(Ratio(0.951, 0.94, 0.96), goodput) == BAD
    assert classify(Ratio(0.975, 0.96, 0.99), goodput) == UNCLEAR


def gated(ratio: float, low: float, high: float) -> Ratio:
    """A measurement as the gate judges it with a 0.5 % tolerance: flagged when its low end is above 1.005."""
    return Ratio(ratio, low, high, regressed=low > 1.005)


def run_bisect(tmp_path, shas, slow_from: int, unclear: dict | None = None, broken: set | None = None,
               stop_after: int | None = None, regression: bool = True):
    """A bisect over ``shas`` where commits from index ``slow_from`` on (of shas) cost 5 % more."""
    tree = str(tmp_path / "linux")
    built, measured = [], []
    unclear = dict(unclear or {})

    def build(commit):
        if broken and commit in broken:
            raise RuntimeError("step build: make failed (error: x)")
        built.append(commit)
        return f"{tree}@{commit}"

    def measure(name):
        commit = name.split("@")[1]
        measured.append(commit)
        if stop_after is not None and len(measured) > stop_after:
            raise KeyboardInterrupt
        if unclear.get(commit):
            unclear[commit] -= 1
            return gated(1.025, 1.015, 1.035)
        slow = regression and shas.index(commit) >= slow_from
        return gated(1.05, 1.045, 1.055) if slow else gated(1.0, 0.995, 1.005)

    b = Bisect(tree, shas[0], shas[-1], str(tmp_path / "run"), build, measure, say=lambda m: None)
    b.load()
    return b, b.run(), built, measured


def test_it_names_the_first_bad_commit_in_log2_steps(tmp_path):
    _tree, shas = history(tmp_path)
    b, (first, suspects), _built, _measured = run_bisect(tmp_path, shas, slow_from=11)
    assert first == shas[11] and suspects == [shas[11]]
    steps = [s for s in b.steps if s.kind == "step"]
    assert len(steps) == 4  # 15 commits between: log2(16)
    assert [s.verdict for s in steps] == [GOOD if shas.index(s.commit) < 11 else BAD for s in steps]
    assert b.steps[0].kind == "confirm" and b.steps[0].verdict == BAD
    lines = (tmp_path / "run" / "bisect.jsonl").read_text().splitlines()
    assert [json.loads(line)["commit"] for line in lines] == [s.commit for s in b.steps]
    assert b.steps[1].subject.startswith("commit ")


def test_no_regression_ends_after_the_confirming_pair(tmp_path):
    _tree, shas = history(tmp_path)
    b, outcome, _built, measured = run_bisect(tmp_path, shas, slow_from=11, regression=False)
    assert outcome is None and len(measured) == 1 and b.steps[0].verdict == GOOD


def test_an_unclear_step_is_measured_again_then_skipped(tmp_path):
    _tree, shas = history(tmp_path)
    # the first midpoint (index 8) is unclear twice: skipped; its neighbour is measured instead
    b, (first, _suspects), _built, measured = run_bisect(tmp_path, shas, slow_from=11, unclear={shas[8]: 2})
    assert [s.verdict for s in b.steps if s.commit == shas[8]] == [UNCLEAR, UNCLEAR]
    assert measured.count(shas[8]) == 2 and first == shas[11]
    # unclear once, then clear: measured again at once, and kept
    again = tmp_path / "again"
    again.mkdir()
    _, shas2 = history(again)
    b2, (first2, _), _, measured2 = run_bisect(again, shas2, slow_from=11, unclear={shas2[8]: 1})
    assert measured2[1:3] == [shas2[8], shas2[8]] and first2 == shas2[11]
    assert [s.verdict for s in b2.steps if s.commit == shas2[8]] == [UNCLEAR, GOOD]


def test_a_commit_that_does_not_build_is_skipped_and_can_leave_a_range(tmp_path):
    _tree, shas = history(tmp_path)
    b, (first, suspects), _built, _measured = run_bisect(tmp_path, shas, slow_from=11, broken={shas[10]})
    failed = [s for s in b.steps if s.verdict == FAILED]
    assert [s.commit for s in failed] == [shas[10]] and "make failed" in failed[0].note
    assert first is None and suspects == [shas[10], shas[11]]  # git bisect's "one of these"


def test_an_interrupted_bisect_goes_on_where_it_stopped(tmp_path):
    _tree, shas = history(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_bisect(tmp_path, shas, slow_from=11, stop_after=2)
    done_before = [json.loads(line)["commit"] for line in (tmp_path / "run" / "bisect.jsonl").read_text().splitlines()]
    assert len(done_before) == 2  # the confirm and one step were kept
    b, (first, _), _built, measured = run_bisect(tmp_path, shas, slow_from=11)
    assert first == shas[11]
    assert not set(done_before) & set(measured)  # nothing measured twice
    assert [s.commit for s in b.steps][:2] == done_before


def test_bad_input_is_refused_in_one_line(tmp_path):
    tree, shas = history(tmp_path, n=3)
    with pytest.raises(BisectError, match="is not an ancestor of BAD"):
        bisect.commits_between(tree, shas[3], shas[1])
    with pytest.raises(BisectError, match="the same commit"):
        bisect.commits_between(tree, shas[1], shas[1])
    with pytest.raises(BisectError, match="rev-parse"):
        bisect.commits_between(tree, "no-such-ref", shas[1])


def test_the_next_commit_and_the_result_are_pure():
    commits = [f"c{i}" for i in range(8)]
    assert bisect.next_commit(commits, []) == 3  # halfway between -1 (GOOD) and 7 (BAD)
    steps = [Step("step", "c3", "", GOOD), Step("step", "c5", "", BAD), Step("step", "c4", "", BAD)]
    assert bisect.next_commit(commits, steps) is None
    assert bisect.result(commits, steps) == ("c4", ["c4"])
