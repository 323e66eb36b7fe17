"""Bad input, as users type it: every command answers with one line that names the problem,
exits nonzero, shows no traceback, and leaves nothing in the kernel.

The commands run as real processes (as root, as on a user's machine, except where the case
is the missing privilege).  The API cases at the end use the kernel: a bad profile given
to a network that is up must fail before anything reaches the kernel's xfrm tables.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from experiments import doctor
from testbed import netns

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEP = [sys.executable, os.path.join(REPO, "experiments", "packet_size_sweep.py")]
CLI = [sys.executable, "-m", "cli.main"]


def seed(script: str) -> list[str]:
    return [sys.executable, os.path.join(REPO, "experiments", script)]
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def _host_lacks_esp() -> bool:
    return bool(doctor.probe(tools=False).missing())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "a-file").write_text("not a directory\n")
    (d / "empty").mkdir()
    (d / "garbage").mkdir()
    (d / "garbage" / "results.jsonl").write_text("hello\n")
    (d / "no-goodput").mkdir()
    (d / "no-goodput" / "results.jsonl").write_text(json.dumps({"profile": "none", "size_bytes": 500}) + "\n")
    (d / "all-failed").mkdir()
    (d / "all-failed" / "meta.json").write_text(json.dumps({"backend": "uml", "kernel_release": "6.1.176"}))
    (d / "all-failed" / "results.jsonl").write_text(json.dumps(
        {"profile": "none", "size_bytes": 500, "goodput_mbps": None, "failed": True, "repetition": 0}) + "\n")
    only_iperf3 = d / "only-iperf3"
    only_iperf3.mkdir()
    (only_iperf3 / "iperf3").symlink_to(shutil.which("iperf3"))
    return d


#: (id, command, arguments, what the line must say); {d} is the module's scratch directory.
CASES = [
    # the sweep script: values
    ("rate zero", SWEEP, ["--rates", "0"], "rates must be positive"),
    ("seed 003 rate zero", seed("seed003_gateway_rates.py"), ["--rates", "0"], "rates must be positive"),
    ("seed 000 unknown part", seed("seed000_x230_gigabit.py"), ["--parts", "nope"], "--parts: unknown part nope"),
    ("seed 002 no transactions", seed("seed002_ttcp_topologies.py"), ["--transactions", "0"],
     "--transactions must be >= 1"),
    ("seed 004 no clients", seed("seed004_ipv6_clients.py"), ["--max-clients", "0"], "--max-clients must be 1..16"),
    ("seed 004 rate above its nics", seed("seed004_ipv6_clients.py"), ["--rate", "1000"],
     "clients1: 1000 Mbit/s is above the seed's fastest link, 100 Mbit/s"),
    ("seed 002 a part's cpu regime", seed("seed002_ttcp_topologies.py"), ["--parts", "h2h_cpu"],
     "h2h_cpu is how --scale auto measures h2h unshaped"),
    ("seed 002 cpu claims at scaled rates", seed("seed002_ttcp_topologies.py"), ["--parts", "h2h", "--scale", "40"],
     "--parts h2h with --scale 40: its claims (h2h-small, h2h-8k, gateway-quicker) rest on the seed's own CPU"),
    ("seed scale below one", seed("seed003_gateway_rates.py"), ["--scale", "0.5"], "a factor in 1..1000, not 0.5"),
    ("seed scale not a number", seed("seed003_gateway_rates.py"), ["--scale", "fast"], "auto or a number >= 1"),
    ("seed budget negative", seed("seed003_gateway_rates.py"), ["--budget=-1"], "minutes in 0..10080"),
    ("probe rate the link cannot carry", SWEEP, ["--rates", "1", "--probe-rate", "100"],
     "--probe-rate 100 at 1 Mbit/s: the probe's packets would take 8.2% of the link"),
    ("probe rate out of range", SWEEP, ["--probe-rate", "500"], "round trips a second in 1..100, not 500"),
    ("transaction size above tcp's write", CLI, ["bench", "transactions", "--sizes", "1,70000"],
     "request/response sizes must be bytes in 1..65535"),
    ("most repetitions below least", SWEEP, ["--repetitions", "5", "--max-repetitions", "3"],
     "--max-repetitions 3 is below --repetitions 5"),
    ("seed 001 udp bitrate", seed("seed001_netio_3des_ah.py"), ["--udp-bitrate", "fast"], "udp_bitrate must be a rate"),
    ("rate negative", SWEEP, ["--rates=-5"], "rates must be positive"),
    ("rate not a number", SWEEP, ["--rates", "fast"], "argument --rates: expected comma-separated float"),
    ("rates empty", SWEEP, ["--rates", ","], "give at least one value"),
    ("mss too small", SWEEP, ["--sizes", "50"], "TCP MSS values: 88..1460"),
    ("mss over the mtu", SWEEP, ["--sizes", "1500"], "TCP MSS values: 88..1460"),
    ("write size too big", SWEEP, ["--size-mode", "write", "--sizes", "70000"], "sizes must be bytes in 16..65000"),
    ("unknown profile", SWEEP, ["--profiles", "aes-gcm-512"], "unknown profile part"),
    ("icv not allowed", SWEEP, ["--profiles", "aes-gcm-256-icv7"], "aes-gcm-256-icv7"),
    ("unknown topology", SWEEP, ["--topology", "ring"], "argument --topology: invalid choice: 'ring'"),
    ("no clients", SWEEP, ["--topology", "road_warrior", "--clients", "0"], "clients must be 1..200"),
    ("too many clients", SWEEP, ["--topology", "multi_host_to_host", "--clients", "500"], "clients must be 1..200"),
    ("ip version 5", SWEEP, ["--ip", "5"], "ip_versions must be 4, 6 or both"),
    ("transport sctp", SWEEP, ["--transport", "sctp"], "transports must be among tcp, udp"),
    ("udp bitrate", SWEEP, ["--transport", "udp", "--udp-bitrate", "fast"], "udp_bitrate must be a rate"),
    ("duration zero", SWEEP, ["--duration", "0"], "duration must be seconds in 0.5..3600, not 0.0"),
    ("duration too short", SWEEP, ["--duration", "0.2"], "duration must be seconds in 0.5..3600, not 0.2"),
    ("duration not a number", SWEEP, ["--duration", "two"], "argument --duration: invalid"),
    ("negative warm-up", SWEEP, ["--warmup=-1"], "warm-up must be seconds in 0.2..600, not -1.0"),
    ("no repetitions", SWEEP, ["--repetitions", "0"], "repetitions must be 1..50, not 0"),
    ("mtu too small", SWEEP, ["--mtu", "500"], "mtu"),
    ("unknown mode", SWEEP, ["--mode", "bulk"], "argument --mode: invalid choice: 'bulk'"),
    ("wireguard in transport mode", SWEEP, ["--profiles", "wireguard", "--mode", "transport"],
     "WireGuard is a tunnel and has no transport mode"),
    ("wireguard stacked", SWEEP, ["--profiles", "wireguard+ipcomp"], "WireGuard is a tunnel of its own"),
    ("wireguard keyed by ike", SWEEP, ["--profiles", "wireguard", "--keying", "ike"], "WireGuard makes its own keys"),
    ("wireguard on debian's kernel", SWEEP, ["--profiles", "wireguard", "--rates", "10", "--kernel", "uml",
                                            "--uml-kernel", "debian", "--out", "{d}/wg"],
     "has none: --uml-kernel recipe (the project's kernel) has it"),
    ("demo wireguard in transport mode", CLI, ["demo", "vpn_gateway", "--profile", "wireguard", "--mode",
                                               "transport", "--web"], "WireGuard is a tunnel and has no transport"),
    ("unknown pmtu", SWEEP, ["--pmtu", "maybe"], "argument --pmtu: invalid choice"),
    ("unknown option", SWEEP, ["--speed", "10"], "unrecognized arguments: --speed 10"),
    # the sweep script: paths, kernels, tools, privileges
    ("out is a file", SWEEP, ["--out", "{d}/a-file"], "exists and is not a directory"),
    ("out unwritable", SWEEP, ["--rates", "10", "--out", "/proc/itb-nope"], "/proc/itb-nope"),
    ("uml kernel missing", SWEEP, ["--kernel", "uml", "--uml-kernel", "{d}/nope"], "nope does not exist"),
    ("uml kernel not executable", SWEEP, ["--kernel", "uml", "--uml-kernel", "{d}/a-file"],
     "is neither an executable UML kernel image, an x86 bzImage"),
    ("uml kernel no such version", SWEEP, ["--kernel", "uml", "--uml-kernel", "6.99"],
     "Debian's archive here has no linux-source-6.99"),
    ("uml kernel bad suffix", SWEEP, ["--uml-kernel", "6.12+patch:{d}/nope.patch"], "patch file"),
    ("kernel build unknown", CLI, ["kernel", "build", "nosuch"], "nosuch does not exist"),
    ("uml modules missing", SWEEP, ["--uml-modules", "{d}/nope"], "is not a directory"),
    ("uml memory", SWEEP, ["--uml-mem", "lots"], "'lots' is not a size like 512M or 2G"),
    ("unknown kernel choice", SWEEP, ["--kernel", "bsd"], "argument --kernel: invalid choice"),
    ("no iperf3", SWEEP, ["--rates", "10", "env:PATH=/nonexistent"], "iperf3 not found: install"),
    ("no mnexec", SWEEP, ["--rates", "10", "env:PATH={d}/only-iperf3"], "mnexec not found: install"),
    ("not root", NOBODY + SWEEP, ["--rates", "10"], "needs root"),
    # ipsec-testbed
    ("unknown command", CLI, ["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    ("overhead unknown profile", CLI, ["overhead", "aes-foo"], "unknown profile part 'aes-foo'"),
    ("overhead mtu", CLI, ["overhead", "aes-gcm-256", "--mtu", "100"], "mtu"),
    ("overhead ip 5", CLI, ["overhead", "--ip", "5"], "argument --ip: invalid choice: 5"),
    ("profiles unknown", CLI, ["profiles", "aes-cbc-999-sha1"], "aes-cbc-999"),
    ("uml without command", CLI, ["uml"], "give a command after --"),
    ("regress unknown metric", CLI, ["regress", "--run", "{d}", "--metrics", "goodput,joules"],
     "unknown metric 'joules'; metrics: goodput, cpu-per-gb, cpu-per-packet"),
    ("regress no baseline, no history", CLI, ["regress", "--suite", "smoke", "--history", "off"],
     "give --baseline FILE to compare with"),
    ("sweep history unreachable", SWEEP, ["--rates", "10", "--history", "postgresql://nobody@127.0.0.1:1/none"],
     "cannot connect (connection"),
    ("sweep history not one", SWEEP, ["--rates", "10", "--history", "{d}/a-file"], "a-file: cannot open it"),
    ("history off", CLI, ["history", "--history", "off"], "the history is off"),
    ("uml memory", CLI, ["uml", "--mem", "12X", "--", "true"], "'12X' is not a size like 512M or 2G"),
    ("uml timeout", CLI, ["uml", "--timeout", "-5", "--", "true"], "is not a positive number of seconds"),
    ("uml kernel", CLI, ["uml", "--uml-kernel", "{d}/nope", "--", "true"], "nope does not exist"),
    ("doctor kernel choice", CLI, ["doctor", "--kernel", "nope"], "argument --kernel: invalid choice: 'nope'"),
    ("test kernel choice", CLI, ["test", "--kernel", "nope"], "argument --kernel: invalid choice: 'nope'"),
    ("clean option", CLI, ["clean", "--all-of-it"], "unrecognized arguments: --all-of-it"),
    ("doctor not root", NOBODY + CLI, ["doctor"], "needs root"),
    ("clean not root", NOBODY + CLI, ["clean"], "needs root"),
    ("report missing dir", CLI, ["report", "{d}/nope"], "not a directory"),
    ("report on a file", CLI, ["report", "{d}/a-file"], "not a directory"),
    ("report empty dir", CLI, ["report", "{d}/empty"], "results.jsonl: no such file"),
    ("report garbage", CLI, ["report", "{d}/garbage"], "results.jsonl:1: not a JSON record"),
    ("report record lacks goodput", CLI, ["report", "{d}/no-goodput"], "record lacks goodput_mbps"),
    ("report only failed points", CLI, ["report", "{d}/all-failed"], "no measured points"),
]


def kernel_state() -> tuple:
    """What a refused command must not leave: the testbed's namespaces (the root namespace is
    compared by the suite's own fixture around every test)."""
    return tuple(netns.list_ours())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_line_and_leaves_nothing(case, files):
    _, command, args, expected = case
    env = dict(os.environ)
    argv = []
    for a in args:
        a = a.replace("{d}", str(files))
        if a.startswith("env:"):
            key, _, value = a[4:].partition("=")
            env[key] = value
        else:
            argv.append(a)
    expected = expected.replace("{d}", str(files))
    before = kernel_state()
    out = subprocess.run([*command, *argv], capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
                         stdin=subprocess.DEVNULL)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode != 0, f"accepted: {out.stdout[-500:]}{out.stderr[-500:]}"
    assert "Traceback" not in out.stderr + out.stdout
    assert len(lines) == 1, f"expected one line, got:\n{out.stderr}"
    assert expected in lines[0], lines[0]
    assert kernel_state() == before


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30


def test_a_kernel_without_esp_is_named_in_one_line():
    if not _host_lacks_esp():
        pytest.skip("the host kernel has ESP: --kernel host is not bad input here "
                    "(the UML cases above still run)")
    out = subprocess.run([*SWEEP, "--kernel", "host", "--rates", "10"], capture_output=True, text=True, cwd=REPO,
                         timeout=120, stdin=subprocess.DEVNULL)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 1 and len(lines) == 1 and "Traceback" not in out.stderr
    assert "--kernel host, but host kernel" in lines[0] and "lacks esp" in lines[0]


def test_debug_shows_the_traceback_instead():
    # the "out unwritable" case above, asked with --debug: where it came from, not one line
    out = subprocess.run([*SWEEP, "--debug", "--rates", "10", "--out", "/proc/itb-nope"], capture_output=True,
                         text=True, cwd=REPO, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 1
    assert "Traceback (most recent call last)" in out.stderr and "/proc/itb-nope" in out.stderr
    assert "--debug shows where" not in out.stderr


# -- the API, with the kernel --------------------------------------------------------------

def test_a_bad_profile_on_a_running_network_reaches_no_kernel_table():
    from topologies import build_spec
    from topologies.network import Network

    with Network(build_spec("vpn_gateway")) as net:
        for bad, message in (("aes-gcm-512", "unknown profile part"), ("aes-gcm-256-icv7", "icv"),
                             ("3des-cbc-sha999", "unknown profile part")):
            with pytest.raises(ValueError, match=message) as e:
                net.apply_ipsec(bad, "tunnel")
            assert "\n" not in str(e.value)
            with pytest.raises(ValueError, match="mode"):
                net.apply_ipsec("aes-gcm-256", "sideways")
        for node in ("gw1", "gw2", "h1", "h2"):
            for what in ("state", "policy"):
                shown = subprocess.run(["ip", "-n", net.ns(node), "xfrm", what], capture_output=True,
                                       text=True, check=True).stdout
                assert shown == "", f"{node} holds xfrm {what} after refused input:\n{shown}"


@pytest.mark.parametrize("call, message", [
    (lambda: __import__("topologies").build_spec("road_warrior", clients=0), "clients must be 1..200"),
    (lambda: __import__("topologies").build_spec("ring"), "unknown topology"),
    (lambda: __import__("topologies.shaping", fromlist=["x"]).ShapingSpec(rate_mbit=0), "rate_mbit"),
    (lambda: __import__("experiments.engine.sweep", fromlist=["x"]).SweepSpec(duration_s=0.1), "seconds in 0.5..3600"),
])
def test_api_rejects_in_one_line_before_the_kernel(call, message):
    before = kernel_state()
    with pytest.raises(ValueError, match=message) as e:
        call()
    assert "\n" not in str(e.value)
    assert kernel_state() == before
