"""docs/cli.md is every parser's help as it is now (cli.reference), and says what the parsers accept."""
from cli import reference


def test_the_command_reference_is_what_the_parsers_say():
    assert reference.PAGE.read_text() == reference.render(), \
        "docs/cli.md is out of date: run `.venv/bin/python -m cli.pages` and commit it"


def test_every_command_and_script_has_its_section_with_its_options():
    page = reference.PAGE.read_text()
    titles = [title for title, _ in reference.sections()]
    for command in ("sweep", "reproduce", "bench", "doctor", "report", "regress", "demo", "clean", "test", "uml",
                    "profiles", "overhead"):
        assert f"ipsec-testbed {command}" in titles
    assert [t for t in titles if t.startswith("ipsec-testbed reproduce ")] == [
        f"ipsec-testbed reproduce {seed}" for seed in ("000", "001", "002", "003", "004")]
    # options that the help once promised and the parser refused are documented as the parser takes them
    assert "--uml-kernel NAME" in page and "--inject-slowdown PERCENT" in page and "--no-speed-probe" in page


def test_the_page_does_not_depend_on_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    assert reference.render() == reference.PAGE.read_text()


def test_the_front_door_takes_its_own_options_before_a_job_with_its_own_parser(capsys):
    import pytest

    from cli.main import main

    assert main(["-v", "reproduce", "--help"]) == 0
    assert "seeds:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["--debug", "sweep", "--help"])
    assert done.value.code == 0 and "ipsec-testbed sweep" in capsys.readouterr().out
