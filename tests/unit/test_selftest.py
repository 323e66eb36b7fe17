"""The suite runner's bookkeeping: counts from JUnit XML and the closing verdict."""
from cli.selftest import Counts, _summary, parse_junit

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1"
failures="2" skipped="3" tests="10" time="1.0"></testsuite></testsuites>"""


def test_parse_junit_counts_errors_as_failures(tmp_path):
    p = tmp_path / "j.xml"
    p.write_text(JUNIT)
    assert parse_junit(str(p)) == Counts(passed=4, failed=3, skipped=3)


def test_missing_junit_is_nothing_run(tmp_path):
    assert parse_junit(str(tmp_path / "none.xml")).total == 0


def test_suite_fails_when_no_esp_test_ran(capsys):
    assert _summary(Counts(passed=5), 0, Counts(), 0, "nowhere") == 1
    assert "ESP WAS NOT EXERCISED" in capsys.readouterr().err


def test_suite_passes_only_when_both_parts_pass(capsys):
    assert _summary(Counts(passed=5), 0, Counts(passed=2), 0, "UML") == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "tests: 7 passed, 0 failed"
    assert _summary(Counts(passed=5), 0, Counts(passed=2, failed=1), 1, "UML") == 1
    assert _summary(Counts(passed=4, failed=1), 1, Counts(passed=2), 0, "UML") == 1


def test_integration_that_never_started_counts_as_a_failure(capsys):
    assert _summary(Counts(passed=5), 0, Counts(), 125, "UML") == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "tests: 5 passed, 1 failed"


def test_module_seconds_adds_up_each_modules_cases(tmp_path):
    from cli.selftest import module_seconds

    path = tmp_path / "junit.xml"
    path.write_text('<testsuites><testsuite tests="3">'
                    '<testcase classname="tests.integration.test_shaping" name="a" time="1.5"/>'
                    '<testcase classname="tests.integration.test_shaping" name="b" time="2.0"/>'
                    '<testcase classname="tests.integration.test_bounds.TestX" name="c" time="4"/>'
                    '</testsuite></testsuites>')
    assert module_seconds(str(path)) == {"test_shaping": 3.5, "test_bounds": 4.0}
    assert module_seconds(str(tmp_path / "absent.xml")) == {}


def test_the_slowest_tests_are_named_slowest_first_over_every_stage(tmp_path):
    from cli.selftest import slowest

    stages = {"unit.xml": [("test_a", "x", "0.5")], "host0.xml": [("test_b", "y", "7"), ("test_b", "z", "")]}
    for name, cases in stages.items():
        rows = "".join(f'<testcase classname="tests.host.{m}" name="{n}" time="{t}"/>' for m, n, t in cases)
        (tmp_path / name).write_text(f"<testsuites><testsuite>{rows}</testsuite></testsuites>")
    paths = [str(tmp_path / "unit.xml"), str(tmp_path / "host0.xml"), str(tmp_path / "absent.xml")]
    assert slowest(paths, 2) == [(7.0, "test_b::y"), (0.5, "test_a::x")]
