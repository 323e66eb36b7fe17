"""bench ab_power: its command line, its trials kept and resumed, and its table, with stand-ins for the A/Bs."""
from __future__ import annotations

from benchmarks import ab_power


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(tmp_path, bench_cli):
    assert bench_cli.options("ab_power") == ab_power.Options("detect", 10, (0.0, 2.0, 5.0, 10.0),
                                                             f"{ab_power.REPO}/runs/ab-power")
    assert bench_cli.options("ab_power", "--trials", "3", "--levels", "0,5", "--suite", "counted", "--out",
                             str(tmp_path)) == ab_power.Options("counted", 3, (0.0, 5.0), str(tmp_path))
    for words in (["--levels", "0,100"], ["--levels", "two"], ["--trials", "-1"]):
        bench_cli.refuses("ab_power", *words)


def test_the_trials_are_kept_and_a_second_run_goes_on_from_them(tmp_path, monkeypatch):
    calls = []

    def stand_in(out, suite, level, k):
        calls.append((k, level))
        if len(calls) == 4:
            raise RuntimeError("trial 1 at 5 % failed (exit 2)")
        return ab_power.Trial(k, level, ("cpu_us_per_packet",) if level else (), level * 0.9, 1 + level / 100,
                              60.0 + k, f"{out}/trial{k:02d}")

    monkeypatch.setattr(ab_power, "trial", stand_in)
    args = ab_power.Options(trials=2, levels=(0.0, 5.0), out=str(tmp_path))
    first = ab_power.run(args)
    assert first.error and [(t.trial, t.level) for t in first.trials] == [(0, 0.0), (0, 5.0), (1, 0.0)]
    assert ab_power.BENCHMARK.status(first) == 1
    second = ab_power.run(args)  # only the one that failed
    assert calls[4:] == [(1, 5.0)] and not second.error and ab_power.BENCHMARK.status(second) == 0
    assert second.trials[:3] == first.trials  # read back from trials.jsonl as they were
    rows = ab_power.page(args, second).splitlines()
    assert rows[1].split()[:3] == ["0%", "2", "0"] and rows[1].endswith("flagged at most 0.2 of 2: MET")
    assert rows[2].split()[:3] == ["5%", "2", "2"] and rows[2].endswith("flagged at least 1.8 of 2: MET")
