"""bench uml_overhead: its command line, and its table on made-up boots."""
from __future__ import annotations

import math

import pytest

from benchmarks import uml_overhead as bench
from cli import bench as cli_bench


def options(*argv: str) -> bench.Options:
    """The options ``ipsec-testbed bench uml_overhead ARGV...`` runs with."""
    return cli_bench.options_from(bench.BENCHMARK, cli_bench.build_parser(bench.BENCHMARK).parse_args(argv))


def test_the_command_line_gives_the_options_the_old_parser_gave(capsys):
    assert options() == bench.Options(5, "2G")
    assert options("--repeat", "2", "--mem", "512M") == bench.Options(2, "512M")
    with pytest.raises(ValueError, match=r"^--repeat must be at least 1, not 0"):
        options("--repeat", "0")
    with pytest.raises(SystemExit) as refused:
        cli_bench.main(["uml_overhead", "--mem", "lots"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == ("ipsec-testbed bench uml_overhead: error: --mem must be a size like 512M or "
                                       "2G, not 'lots' (see ipsec-testbed bench uml_overhead --help)\n")


def test_the_table_gives_each_cases_least_median_and_most_and_says_when_it_printed_nothing():
    result = bench.Result("6.1.0", 2, "/usr/bin/linux.uml",
                          (bench.Case("echo (boot to command)", (1.5, 1.0, 2.0), (1.6, 1.1, 2.1)),
                           bench.Case("true (trivial command)", (math.nan,) * 3, (1.2, 1.2, 1.3))), 0.002)
    lines = bench.page(bench.Options(3, "1G"), result).splitlines()
    assert lines[0] == "UML overhead on 6.1.0 host, 2 CPUs, kernel /usr/bin/linux.uml, mem=1G, 3 boots per case"
    assert lines[2].split()[-6:] == ["1.00", "1.50", "2.00", "1.10", "1.60", "2.10"]
    assert "(no output)" in lines[3] and lines[3].split()[-3:] == ["1.20", "1.20", "1.30"]
    assert lines[-1] == "for comparison, `true` on the host: 0.0020 s"
