"""bench shaping_accuracy: its command line, -v among the old parser's spellings."""
from __future__ import annotations

from benchmarks import shaping_accuracy


def test_its_command_line_gives_the_old_parsers_options_and_refuses_a_bad_value_in_one_line(bench_cli):
    assert bench_cli.options("shaping_accuracy") == shaping_accuracy.Options()
    assert bench_cli.options("shaping_accuracy", "-v", "--qdisc", "htb", "--rates", "10,100", "--duration", "3") == \
        shaping_accuracy.Options(rates=(10.0, 100.0), qdisc="htb", duration=3.0, verbose=True)
    assert bench_cli.options("shaping_accuracy", "--verbose").verbose
    for words in (["--mss", "50"], ["--rates", "0"], ["--repeat", "0"]):
        bench_cli.refuses("shaping_accuracy", *words)
