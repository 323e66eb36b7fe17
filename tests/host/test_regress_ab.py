"""A/B of two kernels as a kernel developer runs it: the same kernel as A and B (an A/A
test), repetitions interleaved, nothing flagged, every repetition in its own run directory."""
import json

from conftest import run_cli


def test_ab_interleaves_and_an_a_a_comparison_flags_nothing(tmp_path):
    out = run_cli("regress", "--ab", "uml", "uml", "--suite", "quick", "--repetitions", "2", "--out",
                  str(tmp_path), "--junit", str(tmp_path / "ab.xml"), timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "0 of 2 points regressed" in out.stdout
    assert "A/B run 4 of 4" in out.stderr
    times = {}
    for label in ("a", "b"):
        records = [json.loads(line) for line in (tmp_path / label / "results.jsonl").read_text().splitlines()]
        assert sorted((r["profile"], r["repetition"]) for r in records) == [
            ("aes-gcm-128", 0), ("aes-gcm-128", 1), ("none", 0), ("none", 1)]
        assert len(json.loads((tmp_path / label / "meta.json").read_text())["runs"]) == 2
        for r in records:
            times.setdefault(r["repetition"], {})[label] = r["time"]
    # ABBA: repetition 0 measured on A first, repetition 1 on B first
    assert times[0]["a"] <= times[0]["b"] and times[1]["b"] <= times[1]["a"]
