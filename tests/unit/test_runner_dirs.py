"""Where run directories go by default: the checkout's runs/, or the current directory for an installed copy."""
from __future__ import annotations

import os

from experiments import runner


def test_a_checkout_keeps_its_runs_and_an_installed_copy_writes_where_it_is_run(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "setup.py").touch()
    assert runner.runs_dir(str(checkout)) == str(checkout / "runs")
    site = tmp_path / "site-packages"  # a wheel's packages: no setup.py beside them
    site.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert runner.runs_dir(str(site)) == os.path.join(str(work), "runs")
    out = runner.out_dir_of(None, str(site), "vpn_gateway")
    assert out.startswith(str(work / "runs")) and out.endswith("-vpn_gateway")
    assert runner.out_dir_of(str(tmp_path / "mine"), str(site), "x") == str(tmp_path / "mine")
