"""Fixtures the unit tests share."""
from __future__ import annotations

from typing import Any

import pytest

from cli import bench
from experiments.benchmark import load


class BenchCommandLine:
    """A benchmark's command line as ``ipsec-testbed bench NAME`` reads it; nothing is ever run."""

    def __init__(self, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        monkeypatch.setattr(bench, "run", self._ran)

    @staticmethod
    def _ran(b, options, command, allow_concurrent=False) -> int:
        raise AssertionError(f"bench {b.name} would have run with {options}")

    def options(self, name: str, *words: str) -> Any:
        """The options ``words`` give the benchmark ``name``."""
        b = load(name)
        return bench.options_from(b, bench.build_parser(b).parse_args(list(words)))

    def refuses(self, name: str, *words: str) -> None:
        """``words`` refused before anything runs: exit status 2 and one line that names the first of them."""
        with pytest.raises(SystemExit) as e:
            bench.main([name, *words])
        err = self.capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and words[0] in err, err


@pytest.fixture
def bench_cli(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> BenchCommandLine:
    """:class:`BenchCommandLine`: a benchmark's options from its words, or their one-line refusal."""
    return BenchCommandLine(capsys, monkeypatch)
