"""README.md is a front page, and the pages under docs/ say only what the code does.

The reference itself is generated (docs/cli.md from the parsers, docs/records.md and docs/meta.md
from the record module); here the prose around it is checked: links and anchors that resolve, commands whose options the
parsers take, and a README short enough to read in five minutes.
"""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: Pages written by hand (the generated ones are checked by the tests of their generators).
PAGES = sorted(p for p in (REPO / "docs").rglob("*.md") if p.name not in ("cli.md", "records.md", "meta.md"))
#: ... of which this one is a log: each entry shows the command as it was run, that day.
LOG = REPO / "docs" / "log" / "measurements.md"
#: A commit hash: 7 to 40 hex digits with at least one digit and one letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move reference material to docs/"
    commands = [line.strip() for line in lines[:8] if line.startswith("    ")]
    assert [c.split("#")[0].strip() for c in commands] == ["sudo ./run sweep", "sudo ./run test"], commands


def test_the_readme_cites_no_commit():
    found = [m.group(0) for m in COMMIT.finditer(README.read_text())]
    assert not found, f"README.md names commits {found}: dated figures and their commits go in docs/log/measurements.md"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = [target for target in LINK.findall(page.read_text())
              if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()]
    assert not broken, f"{page.relative_to(REPO)} links to files that do not exist: {broken}"


ANCHORED = re.compile(r"\]\(([^)\s]*)#([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces as hyphens, a
    repeated heading's numbered -1, -2 ..."""
    found, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        fenced = fenced != line.startswith("```")
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fenced:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_every_anchor_names_a_heading(page):
    broken = []
    for target, anchor in ANCHORED.findall(page.read_text()):
        linked = page.parent / target if target else page
        if "://" not in target and linked.suffix == ".md" and linked.exists() and anchor not in anchors(linked):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{page.relative_to(REPO)} links to headings that do not exist: {broken}"


def test_the_anchor_check_reads_headings_as_github_does(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# The counted backend, a third session (2026-11-28, evening)\n## Within ±0.2 %: the tick's\n"
                    "```\n# not a heading\n```\n## TCP_RR\n## TCP_RR\n")
    assert anchors(page) == {"the-counted-backend-a-third-session-2026-11-28-evening", "within-02--the-ticks",
                             "tcp_rr", "tcp_rr-1"}


def _parser(words: list[str]) -> argparse.ArgumentParser | None:
    """The parser of ``ipsec-testbed WORDS...`` (None for a job whose parser is built elsewhere)."""
    from cli.main import build_parser

    job = words[0] if words else ""
    if job == "sweep":
        from cli.sweep import build_parser as sweep_parser

        return sweep_parser()
    if job == "report":
        from cli.report import build_parser as report_parser

        return report_parser()
    if job == "reproduce":
        from cli.reproduce import build_parser as seed_parser
        from experiments.catalogue import reproduction

        try:
            return seed_parser(reproduction(words[1])) if len(words) > 1 else None
        except ValueError:  # `reproduce SEED`, `reproduce --help`
            return None
    if job == "bench":
        return None  # a benchmark's parser is its module's; `bench --help` lists them
    subparsers = build_parser()._subparsers._group_actions[0].choices  # argparse keeps them here
    parser = subparsers.get(job)
    verbs = parser._subparsers._group_actions[0].choices if parser is not None and parser._subparsers else {}
    return verbs.get(words[1], parser) if len(words) > 1 else parser  # `kernel build --x86`: the verb's own


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def commands_in(text: str) -> list[list[str]]:
    """Every ``ipsec-testbed ...`` command line in ``text`` (code blocks and spans), as words."""
    found = []
    for line in text.splitlines():
        for span in [line] if line.startswith("    ") else re.findall(r"`([^`]+)`", line):
            match = re.search(r"(?:^|\s|/)ipsec-testbed\s+(.*)", span.split(" #")[0])
            if match:
                try:
                    found.append(shlex.split(match.group(1).rstrip("\\ ")))
                except ValueError:  # an unbalanced quote in prose
                    continue
    return found


@pytest.mark.parametrize("page", [README, *(p for p in PAGES if p != LOG)], ids=lambda p: str(p.relative_to(REPO)))
def test_the_commands_in_the_docs_use_options_their_parsers_take(page):
    unknown = []
    for words in commands_in(page.read_text()):
        parser = _parser(words)
        if parser is None:
            continue
        options = _options(parser)
        own = words[:words.index("--")] if "--" in words else words  # after --: the command it runs
        unknown += [f"ipsec-testbed {' '.join(words[:2])}: {w.split('=')[0]}" for w in own
                    if w.startswith("--") and w.split("=")[0] not in options]
    assert not unknown, f"{page.relative_to(REPO)} shows options the parsers refuse:\n" + "\n".join(unknown)


def test_the_option_check_finds_an_option_a_parser_refuses():
    words = commands_in("    sudo ipsec-testbed sweep --rates 10 --no-such-option   # a comment --not-this\n"
                        "run `ipsec-testbed regress --suite smoke`, then `ipsec-testbed doctor --json`")
    assert words == [["sweep", "--rates", "10", "--no-such-option"], ["regress", "--suite", "smoke"],
                     ["doctor", "--json"]]
    assert "--no-such-option" not in _options(_parser(words[0])) and "--rates" in _options(_parser(words[0]))
