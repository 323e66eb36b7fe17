"""`ipsec-testbed demo` driven through a real terminal (tmux), as a student uses it: the
guide appears, a ping crosses the tunnel, `capture` shows only ESP on the untrusted link,
`decrypt` shows the pings inside, `--pcap` writes owner-only files, `exit` leaves nothing."""
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
from test_sweep_resume import leftovers

from testbed import waiting

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tmux(*args):
    return subprocess.run(["tmux", "-L", "itb-test", *args], capture_output=True, text=True, check=True).stdout


def screen() -> str:
    return tmux("capture-pane", "-t", "demo", "-p", "-S", "-400")


def wait_for(pattern: str, timeout_s: float = 60.0) -> str:
    """The screen (trailing blank lines cut) once ``pattern`` is found in it."""
    return waiting.until(lambda: (text := screen().rstrip()) and re.search(pattern, text) and text, timeout_s,
                         f"{pattern!r} to appear in the demo's terminal", interval_s=0.3,
                         state=lambda: f"the screen:\n{screen().rstrip()}")


def type_line(line: str) -> None:
    tmux("send-keys", "-t", "demo", line, "Enter")


@pytest.fixture(params=["static", "ike"])
def session(tmp_path, request):
    """The demo in a terminal, its SAs installed or negotiated by IKEv2 (``--keying``)."""
    assert shutil.which("tmux"), "tmux not found: scripts/install.sh installs it"
    before = leftovers()
    pcap = tmp_path / "lab"
    command = (f"cd {REPO} && {sys.executable} -m cli.main demo vpn_gateway --keying {request.param} --pcap {pcap}; "
               f"echo DEMO-EXITED rc=$?; sleep 600")
    tmux("new-session", "-d", "-s", "demo", "-x", "160", "-y", "50", command)
    try:
        yield pcap
    finally:
        # a closed terminal (SIGHUP) tears the demo down too; normally `exit` did already
        subprocess.run(["tmux", "-L", "itb-test", "kill-server"], capture_output=True)
    waiting.until(lambda: leftovers() <= before, 30, "the demo's network to be gone", interval_s=0.5,
                  state=lambda: f"left: {leftovers() - before}")


def test_demo_end_to_end(session):
    text = wait_for(r"mininet>$", 180)
    assert "IPsec Testbed demo: vpn_gateway, aes-gcm-256 in tunnel mode" in text
    assert "h1 - gw1 = gw2 - h2" in text and "capture" in text and "decrypt" in text

    type_line("h1 ping -c 2 h2")
    wait_for(r"2 packets transmitted, 2 received")

    type_line("capture 2")  # 2 pings: 2 requests sent by gw1, 2 replies sent by gw2
    text = wait_for(r"`decrypt` shows what is inside", 60)
    captured = re.findall(r"^ +\d+  (.*)$", text.split("capture 2")[-1], re.M)
    assert len(captured) == 4, text
    assert all("ESP" in line and "ICMP" not in line for line in captured), captured

    type_line("decrypt")
    text = wait_for(r"ESP spi 0x[0-9a-f]+ seq \d+ \(tunnel\)\s+->.*ICMP[\s\S]*mininet>$", 60)
    inner = re.findall(r"ESP spi 0x[0-9a-f]+ seq \d+ \(tunnel\)\s+->\s+(.*)$", text, re.M)
    assert len(inner) == 4 and all("ICMP" in line and "198.18." in line for line in inner), inner
    assert sum("echo-request" in line for line in inner) == 2 and sum("echo-reply" in line for line in inner) == 2

    type_line("sa")
    text = wait_for(r"--- gw2: ip -s xfrm state[\s\S]*mininet>$")
    assert "<key hidden" in text and re.search(r"\d+\(bytes\), \d+\(packets\)", text)

    type_line("exit")
    wait_for(r"DEMO-EXITED rc=0", 60)
    assert "demo: network removed" in screen()

    # --pcap: the capture and a Wireshark configuration with the keys, for the owner only
    assert stat.S_IMODE(session.stat().st_mode) == 0o700
    for name in ("capture-1.pcap", "esp_sa", "preferences"):
        assert stat.S_IMODE((session / name).stat().st_mode) == 0o600, name
    assert len((session / "esp_sa").read_text().splitlines()) >= 3  # header + one line per ESP SA
