"""bench kernel_build: its command line, the configuration's differences from Debian's, and its page."""
from __future__ import annotations

import dataclasses

import pytest

from benchmarks import kernel_build as bench
from cli import bench as cli_bench
from testbed import kernelsource


def options(*argv: str) -> bench.Options:
    """The options ``ipsec-testbed bench kernel_build ARGV...`` runs with."""
    return cli_bench.options_from(bench.BENCHMARK, cli_bench.build_parser(bench.BENCHMARK).parse_args(argv))


def test_the_command_line_gives_the_options_the_old_parser_gave(capsys):
    assert options() == bench.Options(kernelsource.RECIPE, False, None, None, False)
    assert options("6.12", "--tiny", "--fp-bytes", "2696", "--keep", "/tmp/k", "--list") == \
        bench.Options("6.12", True, 2696, "/tmp/k", True)
    with pytest.raises(SystemExit) as refused:
        cli_bench.main(["kernel_build", "/nonexistent/linux"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1
    assert err.startswith("ipsec-testbed bench kernel_build: error: NAME: kernel '/nonexistent/linux': "
                          "/nonexistent/linux does not exist")


def test_the_configurations_differences_by_kind():
    debian = bench.read_config("CONFIG_A=m\nCONFIG_B=m\nCONFIG_C=y\nCONFIG_D=\"x\"\n# CONFIG_E is not set\n"
                               "CONFIG_ONLY_DEBIAN=y\n")
    assert debian["CONFIG_E"] == "n" and debian["CONFIG_D"] == '"x"'
    ours = bench.read_config("CONFIG_A=y\n# CONFIG_B is not set\n# CONFIG_C is not set\nCONFIG_D=\"y\"\n"
                             "# CONFIG_E is not set\nCONFIG_ONLY_OURS=y\n")
    assert bench.differences(debian, ours) == {
        "built in (a module in Debian's)": ["CONFIG_A"], "off (a module in Debian's)": ["CONFIG_B"],
        "off (built into Debian's)": ["CONFIG_C"], "other": ['CONFIG_D: "x" -> "y"']}


def test_the_page_gives_each_stages_time_and_lists_the_modules_left_out_only_when_asked():
    result = bench.Result("/tmp/c", 2, "6.1.0", (("unpacking", 1.0), ("configuring", 11.0), ("building", 21.0),
                                                 ("built", 621.0)), 622.0, 30.5, "6.1.158", "abc",
                          (("built in (a module in Debian's)", ("CONFIG_A",)),
                           ("off (a module in Debian's)", ("CONFIG_B", "CONFIG_C"))))
    lines = bench.page(bench.Options(), result).splitlines()
    assert lines[0] == "building recipe on 2 CPUs (6.1.0 host), cache /tmp/c"
    assert lines[2:5] == ["unpacking      10.0 s", "configuring    10.0 s", "building      600.0 s"]
    assert lines[5] == "total         622.0 s  (10.4 min on 2 CPUs); kernel 30.5 MB, linux 6.1.158, key abc"
    assert lines[-2:] == ["     1 built in (a module in Debian's): A",
                          "     2 off (a module in Debian's) (every module the testbed does not load)"]
    listed = bench.page(bench.Options(list_all=True), result).splitlines()
    assert listed[-1] == "     2 off (a module in Debian's): B C"
    tiny = bench.page(bench.Options(tiny=True), dataclasses.replace(result, differences=None))
    assert tiny.startswith("building the tiny test kernel") and "configuration" not in tiny
