"""The seed scripts on the ESP kernel: small versions of their defaults, measured for real, then judged.

Each runs the script as a user would (a process of its own, with --out), then reads the
run directory with the analysis: every point planned is there, the seed's published
numbers find ours beside them, and the claims the parts measured get a verdict computed
from those numbers (not "not measured").
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import reproduction, reproduction_report
from testbed import waiting
from testbed.record import Record

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(name: str, out: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, os.path.join(REPO, "experiments", name), "--out", out, "--no-report", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def records(run_dir: str, part: str) -> list[Record]:
    """The part's measured records, as the analysis reads them.  A point whose attempts all failed (an
    iperf3 client interrupted before it had connected, at a saturated CPU) is kept in results.jsonl as
    failed and measured again in a later round: that record is not one of the point's repetitions."""
    _, parts = reproduction.load_run(run_dir)
    return list(next(p for p in parts if p.part.name == part).records)


def test_seed000_the_tunnel_keyed_as_the_seed_keyed_it(tmp_path):
    out = str(tmp_path / "seed000")
    run_script("seed000_x230_gigabit.py", out, "--parts", "throughput_tcp,ikev2", "--scale", "10",
               "--repetitions", "2", "--duration", "1", "--budget", "0")
    keyed = records(out, "ikev2")  # IKEv2 with RSA signatures, as the seed's conn blocks
    assert {(r.ip_version, r.profile, r.keying) for r in keyed} == {(4, "aes-gcm-256", "ike-rsa"),
                                                                     (6, "aes-gcm-256", "ike-rsa")}
    for r in keyed:  # both IP versions' tunnels are up together: two SAs each, at each host
        assert len(r.ike_sas) == 8 and all("tunnel rfc4106(gcm(aes))/288/icv128" in sa for sa in r.ike_sas), r.ike_sas
        assert sum(":" in sa.split()[3] for sa in r.ike_sas) == 4, r.ike_sas
    assert all(r.keying == "static" for r in records(out, "throughput_tcp"))
    data = reproduction.evaluate(out)
    for claim in ("penalty-ipv4-ikev2", "penalty-ipv6-ikev2"):
        found = next(c for c in data.claims if c.id == claim)
        assert found.verdict != reproduction.UNMEASURED and len(found.measured) == 1, found
        assert 0.8 < found.measured[0].value < 1.05, found


def test_seed001_udp_table(tmp_path):
    """The seed's claim rested on its own CPU: the part runs unshaped (netio_udp_cpu), this machine's CPU the
    limit, and the claim is judged there."""
    out = str(tmp_path / "seed001")
    run_script("seed001_netio_3des_ah.py", out, "--parts", "netio_udp", "--sizes", "1024,16384",
               "--repetitions", "2", "--duration", "1", "--budget", "0")
    got = records(out, "netio_udp_cpu")
    assert len(got) == 2 * 2 * 2 and all(r.goodput_mbps > 0 for r in got)
    assert {r.rate_mbit for r in got} == {10000.0} and sum(r.bound == "cpu" for r in got) >= 6, \
        [(r.profile, r.size_bytes, r.bound) for r in got]
    assert {r.profile for r in got} == {"none", "3des-cbc-sha1+ah-md5"}
    data = reproduction.evaluate(out)
    measured = [v for v in data.values if v.ours is not None]
    # Table 2's 1 KB and 16 KB rows, with and without IPsec, have ours beside them
    assert {v.id for v in measured} >= {"netio-udp-1024-none", "netio-udp-16384-ipsec"}, [v.id for v in measured]
    half = next(c for c in data.claims if c.id == "half")
    assert half.verdict in (reproduction.HOLDS, reproduction.FAILS, reproduction.UNDECIDED) and len(half.measured) == 2
    assert "unshaped (10000 Mbit/s here)" in half.regime
    assert all(0 < m.value < 1.5 for m in half.measured)


def test_seed002_latency_transactions(tmp_path):
    """Two repetitions, then rounds of one more for the claims left undecided, within a minute's budget."""
    out = str(tmp_path / "seed002")
    proc = run_script("seed002_ttcp_topologies.py", out, "--parts", "latency,latency_ike", "--transactions", "100",
                      "--repetitions", "2", "--budget", "1")
    got = records(out, "latency")
    profiles = [r.profile for r in got]
    assert len(got) >= 4 and profiles.count("none") == profiles.count("3des-cbc-sha1") and set(profiles) == \
        {"none", "3des-cbc-sha1"}
    assert all(r.count == 100 and 0 < r.mean_ms < 1000 and r.keying == "static" for r in got)
    keyed = records(out, "latency_ike")  # the same transactions, 3DES keyed by IKEv2
    assert len(keyed) >= 2 and all(r.keying == "ike" and r.count == 100 for r in keyed)
    undecided = [c.id for c in reproduction.evaluate(out).claims if c.verdict == reproduction.UNDECIDED]
    if len(got) > 4 or len(keyed) > 2:  # a round was measured: it said so
        assert "deciding round 1:" in proc.stderr, proc.stderr[-1500:]
    if undecided:  # what the budget could not decide is named, with what it would take
        assert all(f"undecided: {c}:" in proc.stderr for c in undecided), proc.stderr[-1500:]
    assert all(len(r.ike_sas) == 4 and all("cbc(des3_ede)" in sa for sa in r.ike_sas) for r in keyed)
    # the two parts were measured side by side, a repetition at a time: each repetition's arms (plain, 3DES
    # keyed statically, 3DES keyed by IKE) all before any of the next one's
    times: dict[int, list[str]] = {}
    for r in got + keyed:
        times.setdefault(r.repetition, []).append(r.time)
    reps = sorted(times)
    assert all(len(times[r]) == 3 for r in reps[:2]), times
    assert all(max(times[a]) <= min(times[b]) for a, b in zip(reps, reps[1:], strict=False)), times
    data = reproduction.evaluate(out)
    for claim in ("latency", "keying"):
        found = next(c for c in data.claims if c.id == claim)
        assert found.verdict != reproduction.UNMEASURED and found.measured[0].value > 0, found
    path = reproduction_report.write_report(out)
    assert "Request/response transactions" in Path(path).read_text()


def test_seed004_clients_parts(tmp_path):
    """Claims of both kinds rest on every part: each is measured shaped and unshaped (once: the parts and their
    claims are what is tested here, not their precision)."""
    out = str(tmp_path / "seed004")
    run_script("seed004_ipv6_clients.py", out, "--max-clients", "2", "--repetitions", "1", "--duration", "1",
               "--budget", "0")
    two = records(out, "clients2")
    assert {r.clients for r in two} == {2} and {r.ip_version for r in two} == {6}
    assert len(two) == 3 * 2  # profiles x transports
    unshaped = records(out, "clients2_cpu")
    assert len(unshaped) == 3 * 2 and {r.rate_mbit for r in unshaped} == {10000.0}
    data = reproduction.evaluate(out)
    verdicts = {c.id: c.verdict for c in data.claims}
    assert verdicts["aes-superior"] != reproduction.UNMEASURED
    assert verdicts["des-udp-falls"] != reproduction.UNMEASURED
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    assert meta["seed"] == "004" and [p["name"] for p in meta["parts"]] == ["clients1", "clients1_cpu", "clients2",
                                                                            "clients2_cpu"]
    assert [p.get("regime") for p in meta["parts"]] == ["link", "cpu", "link", "cpu"]


@pytest.mark.parametrize("signal_name", ["SIGTERM"])
def test_a_reproduction_stopped_by_a_signal_resumes(tmp_path, signal_name):
    import signal

    out = str(tmp_path / "seed003")
    cmd = [sys.executable, os.path.join(REPO, "experiments", "seed003_gateway_rates.py"), "--out", out,
           "--no-report", "--rates", "10", "--sizes", "500,1000", "--repetitions", "2", "--duration", "1",
           "--budget", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = os.path.join(out, "gateway", "results.jsonl")

    def recorded() -> int:
        assert proc.poll() is None, f"seed 003 ended (exit {proc.returncode}) before it could be stopped"
        return Path(path).read_text().count("\n") if os.path.exists(path) else 0

    waiting.until(lambda: recorded() >= 2, 120, "seed 003 to record 2 points", state=lambda: f"{recorded()} recorded")
    proc.send_signal(getattr(signal, signal_name))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + getattr(signal, signal_name), err[-2000:]
    assert "stopped by" in err
    with open(os.path.join(out, "meta.json")) as f:
        assert json.load(f)["interrupted"] == signal_name
    before = Path(path).read_text().count("\n")
    run_script("seed003_gateway_rates.py", out, "--rates", "10", "--sizes", "500,1000", "--repetitions", "2",
               "--duration", "1", "--budget", "0")
    got = records(out, "gateway")
    keys = [(r.profile, r.size_bytes, r.repetition) for r in got]
    assert len(keys) == len(set(keys)) == 8 and before >= 2
