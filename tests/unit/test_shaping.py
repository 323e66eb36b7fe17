"""Shaping specs, tc plans and the goodput model, without a kernel."""
import dataclasses
import errno
from typing import ClassVar

import pytest

from ipsec.overhead import theoretical_goodput_mbps
from testbed.backends import GUEST_ENV, UmlBackend
from topologies import shaping
from topologies.shaping import (
    ROOT_HANDLE,
    TC_H_ROOT,
    ShapingError,
    ShapingSpec,
    TcOp,
    apply_shaping,
    default_burst_bytes,
    format_handle,
    plan_shaping,
    remove_shaping,
)

# -- ShapingSpec ------------------------------------------------------------------------------

def test_defaults():
    s = ShapingSpec(10)
    assert (s.qdisc, s.burst_bytes, s.latency_ms, s.framing, s.delay_ms, s.loss_pct) == \
        ("tbf", None, 50.0, "tc", None, None)
    assert s.rate_bytes_per_s == 1_250_000
    assert (s.overhead_bytes, s.mpu_bytes, s.needs_netem) == (0, 0, False)


@pytest.mark.parametrize("rate,bytes_per_s", [
    (1, 125_000), (2, 250_000), (4, 500_000), (10, 1_250_000), (34, 4_250_000), (44, 5_500_000),
    (51, 6_375_000), (100, 12_500_000), (1000, 125_000_000), (0.256, 32_000), (2.5, 312_500),
])
def test_rate_in_bytes_per_second_is_tc_mbit(rate, bytes_per_s):
    # tc's "mbit" is 10**6 bit/s: 1 Mbit/s = 125000 bytes/s
    assert ShapingSpec(rate).rate_bytes_per_s == bytes_per_s


@pytest.mark.parametrize("kwargs,match", [
    (dict(rate_mbit=0), r"rate_mbit must be > 0 and <= 34360"),
    (dict(rate_mbit=-10), r"rate_mbit must be > 0"),
    (dict(rate_mbit=40_000), r"rate_mbit must be > 0 and <= 34360 \(tc's 32-bit bytes/s\)"),
    (dict(rate_mbit="10"), r"rate_mbit must be a number"),
    (dict(rate_mbit=True), r"rate_mbit must be a number"),
    (dict(rate_mbit=float("nan")), r"rate_mbit must be a number"),
    (dict(rate_mbit=1e-7), r"below 1 byte/s"),
    (dict(rate_mbit=10, qdisc="cbq"), r"qdisc must be one of tbf, htb, not 'cbq'"),
    (dict(rate_mbit=10, qdisc="netem"), r"qdisc must be one of tbf, htb"),
    (dict(rate_mbit=10, framing="atm"), r"framing must be one of tc, ethernet .*not 'atm'"),
    (dict(rate_mbit=10, framing="ethernet", qdisc="htb"), r"framing 'ethernet' needs qdisc 'tbf', not 'htb'"),
    (dict(rate_mbit=10, burst_bytes=0), r"burst_bytes must be None .* 1\.\.4294967295, not 0"),
    (dict(rate_mbit=10, burst_bytes=1500.5), r"burst_bytes must be None"),
    (dict(rate_mbit=10, burst_bytes=True), r"burst_bytes must be None"),
    (dict(rate_mbit=10, latency_ms=0), r"latency_ms must be > 0 and <= 10000"),
    (dict(rate_mbit=10, latency_ms="50ms"), r"latency_ms must be a number"),
    (dict(rate_mbit=10, delay_ms=-1), r"delay_ms must be None or 0\.\.60000"),
    (dict(rate_mbit=10, loss_pct=101), r"loss_pct must be None or a percentage in 0\.\.100"),
    (dict(rate_mbit=10, loss_pct=-0.5), r"loss_pct must be None or a percentage"),
])
def test_bad_specs_name_the_field_and_the_allowed_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ShapingSpec(**kwargs)


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ShapingSpec(10).rate_mbit = 20


@pytest.mark.parametrize("delay,loss,netem", [
    (None, None, False), (0, 0, False), (0.0, None, False), (10, None, True), (None, 0.1, True), (5, 1, True),
])
def test_netem_only_for_a_delay_or_a_loss(delay, loss, netem):
    assert ShapingSpec(10, delay_ms=delay, loss_pct=loss).needs_netem is netem


def test_ethernet_framing_adds_preamble_fcs_gap_and_the_minimum_frame():
    s = ShapingSpec(10, framing="ethernet")
    assert s.overhead_bytes == 8 + 4 + 12            # preamble+SFD, FCS, inter-frame gap
    assert s.mpu_bytes == 60 + 24                    # 64-byte minimum frame incl. FCS + 20


# -- plan_shaping: burst, limit, overhead ------------------------------------------------------

# burst = max(4 frames, 4 ms of the rate); a frame is mtu + 14 (tc) or mtu + 14 + 24 (ethernet)
@pytest.mark.parametrize("rate,burst", [
    (1, 6_056),           # 4 ms = 500 B;        4 * 1514 = 6056
    (4, 6_056),           # 4 ms = 2000 B
    (10, 6_056),          # 4 ms = 5000 B
    (34, 17_000),         # 4_250_000 * 0.004 = 17000 > 6056
    (44, 22_000),         # 5_500_000 * 0.004
    (51, 25_500),         # 6_375_000 * 0.004
    (100, 50_000),        # 12_500_000 * 0.004
    (1000, 500_000),      # 125_000_000 * 0.004
])
def test_tbf_burst_and_limit_at_the_seed_rates(rate, burst):
    ops = plan_shaping(ShapingSpec(rate), mtu=1500)
    assert len(ops) == 1
    op = ops[0]
    assert (op.target, op.kind, op.handle, op.parent) == ("qdisc", "tbf", 0x10000, TC_H_ROOT)
    assert op.params["rate_bytes_per_s"] == rate * 125_000
    assert op.params["burst_bytes"] == burst
    assert op.params["latency_us"] == 50_000
    # limit = rate * latency + burst, as `tc ... latency 50ms` computes it
    assert op.params["limit_bytes"] == rate * 125_000 * 50 // 1000 + burst
    assert (op.params["overhead_bytes"], op.params["mpu_bytes"]) == (0, 0)
    # frames, not GSO packets: a peak bucket under two frames makes tbf split every GSO packet
    assert op.params["peak_burst_bytes"] == 2 * 1514 - 1 < 2 * 1514


def test_tbf_10mbit_by_hand():
    p = plan_shaping(ShapingSpec(10), 1500)[0].params
    # 1_250_000 B/s * 0.050 s = 62_500 B of queue + 6_056 B of bucket
    assert (p["burst_bytes"], p["limit_bytes"]) == (6_056, 68_556)


def test_burst_grows_with_the_mtu():
    # jumbo frames: 4 * (9000 + 14)
    assert plan_shaping(ShapingSpec(10), mtu=9000)[0].params["burst_bytes"] == 36_056
    assert default_burst_bytes(1_250_000, 9000) == 36_056


@pytest.mark.parametrize("rate,burst", [
    (1, 6_056),            # 4 frames: 125_000 * 0.01 = 1250 is less
    (10, 12_500),          # 1_250_000 * 0.01
    (100, 125_000),
    (1000, 1_250_000),
])
def test_burst_time_for_user_mode_linux(rate, burst):
    p = plan_shaping(ShapingSpec(rate), 1500, burst_time_s=UmlBackend.shaper_burst_s)[0].params
    assert p["burst_bytes"] == burst
    assert p["limit_bytes"] == rate * 125_000 // 20 + burst       # 50 ms of queue + the bucket


@pytest.mark.parametrize("bad", [0, -0.1, 1.5])
def test_bad_burst_time(bad):
    with pytest.raises(ValueError, match="burst_time_s must be > 0 and <= 1 second"):
        plan_shaping(ShapingSpec(10), 1500, burst_time_s=bad)


def test_kernel_burst_time_follows_the_kernel(monkeypatch):
    monkeypatch.delenv(GUEST_ENV, raising=False)
    assert shaping.kernel_burst_time_s() == 0.004
    monkeypatch.setenv(GUEST_ENV, "uml")
    assert shaping.kernel_burst_time_s() == 0.01


@pytest.mark.parametrize("rate,burst", [(1, 6_152), (10, 6_152), (100, 50_000), (1000, 500_000)])
def test_ethernet_framing_sets_overhead_mpu_and_a_two_packet_peak_burst(rate, burst):
    op = plan_shaping(ShapingSpec(rate, framing="ethernet"), 1500)[0]
    assert (op.params["overhead_bytes"], op.params["mpu_bytes"]) == (24, 84)
    assert op.params["burst_bytes"] == burst                # 4 * (1514 + 24) = 6152 at low rates
    # just under two full packets (2 * 1514 - 1): every GSO packet of >= 2 full
    # segments is split by tbf, so the overhead is charged per segment
    assert op.params["peak_burst_bytes"] == 3027
    assert op.params["peak_rate_bytes_per_s"] == 2**32 - 1
    assert op.params["peak_rate_bytes_per_s"] > op.params["rate_bytes_per_s"]


def test_latency_sets_the_queue():
    p = plan_shaping(ShapingSpec(100, latency_ms=20), 1500)[0].params
    assert p["latency_us"] == 20_000
    assert p["limit_bytes"] == 12_500_000 * 20 // 1000 + 50_000   # 250_000 + 50_000


def test_explicit_burst_is_kept():
    assert plan_shaping(ShapingSpec(10, burst_bytes=30_000), 1500)[0].params["burst_bytes"] == 30_000


def test_burst_below_one_frame_is_refused():
    with pytest.raises(ValueError, match=r"burst_bytes 1500 is smaller than one full-size frame at mtu 1500 "
                                         r"\(1514 bytes"):
        plan_shaping(ShapingSpec(10, burst_bytes=1500), 1500)
    # with the ethernet overhead a frame counts 1538
    with pytest.raises(ValueError, match=r"give at least 1538"):
        plan_shaping(ShapingSpec(10, burst_bytes=1520, framing="ethernet"), 1500)
    assert plan_shaping(ShapingSpec(10, burst_bytes=1514), 1500)[0].params["burst_bytes"] == 1514


def test_burst_too_long_for_tcs_tick_field_is_refused():
    # 10**8 bytes at 125 B/s take 800000 s; the 32-bit tick field holds 274.9 s
    with pytest.raises(ValueError, match=r"burst_bytes 100000000 takes 800000 s at 0.001 Mbit/s"):
        plan_shaping(ShapingSpec(0.001, burst_bytes=10**8), 1500)


@pytest.mark.parametrize("mtu", [0, 67, 65536, 1500.0, None])
def test_bad_mtu(mtu):
    with pytest.raises(ValueError, match="mtu must be an integer in 68..65535"):
        plan_shaping(ShapingSpec(10), mtu)


# -- plan_shaping: htb -------------------------------------------------------------------------

@pytest.mark.parametrize("rate,quantum", [
    (0.1, 1514),       # 12_500 / 10 = 1250 < one frame: raised to 1514
    (1, 12_500),       # 125_000 / 10 (r2q)
    (10, 125_000),     # 1_250_000 / 10
    (100, 200_000),    # 1_250_000 > 200_000: capped
    (1000, 200_000),   # 12_500_000: capped (the default r2q would make the kernel warn here)
])
def test_htb_quantum_is_explicit_and_within_what_the_kernel_accepts_quietly(rate, quantum):
    qdisc, cls, _leaf = plan_shaping(ShapingSpec(rate, qdisc="htb"), 1500)
    assert (qdisc.target, qdisc.kind, qdisc.handle, qdisc.parent) == ("qdisc", "htb", 0x10000, TC_H_ROOT)
    assert qdisc.params == {"default_class": 0x10, "r2q": 10}
    assert (cls.target, cls.kind, cls.handle, cls.parent) == ("class", "htb", 0x10010, 0x10000)
    assert cls.params["quantum_bytes"] == quantum


def test_htb_1000mbit_by_hand():
    _qdisc, cls, leaf = plan_shaping(ShapingSpec(1000, qdisc="htb"), 1500)
    assert cls.params["rate_bytes_per_s"] == cls.params["ceil_bytes_per_s"] == 125_000_000
    assert cls.params["burst_bytes"] == cls.params["cburst_bytes"] == 500_000
    assert (cls.params["overhead_bytes"], cls.params["mpu_bytes"]) == (0, 0)
    # the leaf holds latency's worth of full frames: (6_250_000 + 500_000) / 1514 = 4458.4 -> 4459
    assert (leaf.kind, leaf.handle, leaf.parent) == ("pfifo", 0x100000, 0x10010)
    assert leaf.params["limit_packets"] == 4459


# -- plan_shaping: netem -----------------------------------------------------------------------

def test_netem_is_the_root_and_the_shaper_its_child():
    netem, tbf = plan_shaping(ShapingSpec(10, delay_ms=20, loss_pct=1.5), 1500)
    assert (netem.kind, netem.handle, netem.parent) == ("netem", ROOT_HANDLE, TC_H_ROOT)
    assert netem.params["delay_us"] == 20_000
    assert netem.params["loss_pct"] == 1.5
    # 2 * 1_250_000 B/s * 0.020 s / 54 B (14 + 20 + 20, an ACK) = 926 packets < the 1000 floor
    assert netem.params["limit_packets"] == 1000
    assert (tbf.kind, tbf.handle, tbf.parent) == ("tbf", 0x20000, 0x10001)   # 2: under netem's 1:1
    assert tbf.params["limit_bytes"] == 68_556      # the shaper keeps its own queue


def test_netem_limit_holds_the_delay_line_at_high_rates():
    netem = plan_shaping(ShapingSpec(1000, delay_ms=20), 1500)[0]
    # 2 * 125_000_000 B/s * 0.020 s / 54 B = 92592.6 -> 92593
    assert netem.params["limit_packets"] == 92_593


def test_loss_only_netem_has_no_delay():
    netem = plan_shaping(ShapingSpec(10, loss_pct=0.5), 1500)[0]
    assert (netem.params["delay_us"], netem.params["loss_pct"]) == (0, 0.5)


def test_htb_under_netem():
    _netem, qdisc, cls, leaf = plan_shaping(ShapingSpec(10, qdisc="htb", delay_ms=5), 1500)
    assert (qdisc.handle, qdisc.parent) == (0x20000, 0x10001)
    assert (cls.handle, cls.parent) == (0x20010, 0x20000)
    assert (leaf.handle, leaf.parent) == (0x100000, 0x20010)


@pytest.mark.parametrize("spec", [
    ShapingSpec(10), ShapingSpec(10, qdisc="htb"), ShapingSpec(10, delay_ms=1),
    ShapingSpec(10, qdisc="htb", loss_pct=1), ShapingSpec(1000, framing="ethernet", delay_ms=2),
])
def test_every_plan_is_a_tree_under_root_1(spec):
    ops = plan_shaping(spec, 1500)
    assert (ops[0].handle, ops[0].parent) == (ROOT_HANDLE, TC_H_ROOT)   # removing 1: removes all
    handles = [op.handle for op in ops]
    assert len(set(handles)) == len(handles)
    seen = set()
    for op in ops:
        if op.parent != TC_H_ROOT:
            # a parent is an earlier qdisc (its major) or class
            assert op.parent in seen or (op.parent & 0xFFFF0000) in seen, op.describe()
        seen.add(op.handle)


def test_plan_is_pure_and_repeatable():
    spec = ShapingSpec(44, qdisc="htb", delay_ms=3)
    assert plan_shaping(spec, 1500) == plan_shaping(spec, 1500)


# -- TcOp --------------------------------------------------------------------------------------

def test_describe_reads_like_tc():
    op = plan_shaping(ShapingSpec(10), 1500)[0]
    assert op.describe("itb1a2b3ca") == ("qdisc add dev itb1a2b3ca root handle 1: tbf rate_bytes_per_s 1250000 "
                                         "burst_bytes 6056 latency_us 50000 limit_bytes 68556 "
                                         "overhead_bytes 0 mpu_bytes 0 peak_rate_bytes_per_s 4294967295 "
                                         "peak_burst_bytes 3027")
    cls = plan_shaping(ShapingSpec(10, qdisc="htb"), 1500)[1]
    assert cls.describe().startswith("class add dev DEV parent 1: classid 1:10 htb rate_bytes_per_s 1250000")


def test_tcop_params_are_read_only():
    op = TcOp("qdisc", "tbf", 0x10000, TC_H_ROOT, {"burst_bytes": 1})
    with pytest.raises(TypeError):
        op.params["burst_bytes"] = 2
    with pytest.raises(ValueError, match="target must be qdisc or class"):
        TcOp("filter", "u32", 0, TC_H_ROOT)


@pytest.mark.parametrize("handle,text", [(0x10000, "1:"), (0x10010, "1:10"), (0x100000, "10:"),
                                         (0x20001, "2:1"), (TC_H_ROOT, "root")])
def test_format_handle(handle, text):
    assert format_handle(handle) == text


# -- theoretical goodput -----------------------------------------------------------------------

@pytest.mark.parametrize("args,expected", [
    # IPv4, MSS 1460, timestamps: payload 1460 - 12 = 1448; tc counts 1460 + 20 TCP + 20 IP + 14 Eth = 1514
    ((10, 1460), 10 * 1448 / 1514),                                     # 9.5641
    ((1000, 1460), 956.4068692206077),                                  # 1000 * 1448 / 1514
    ((1, 1460), 0.9564068692206077),
    # the same on a real wire: + preamble 8 + FCS 4 + gap 12 = 1538
    ((10, 1460, 4, "ethernet"), 10 * 1448 / 1538),                      # 9.4148
    # IPv6 at MTU 1500: MSS 1440, payload 1428, 1440 + 20 + 40 + 14 = 1514
    ((100, 1440, 6), 100 * 1428 / 1514),                                # 94.3197
    # no timestamps: the whole MSS is payload
    ((1, 1460, 4, "tc", False), 1 * 1460 / 1514),                       # 0.96433
    # small segments: MSS 88 -> payload 76, frame 88 + 54 = 142 (+24 = 166 on the wire)
    ((100, 88), 100 * 76 / 142),                                        # 53.521
    ((100, 88, 4, "ethernet"), 100 * 76 / 166),                         # 45.783
    # a frame under the 60-byte minimum is padded: 5 + 54 = 59 -> 60, + 24 = 84
    ((84, 5, 4, "ethernet", False), 84 * 5 / 84),                       # 5.0
    ((59, 5, 4, "tc", False), 59 * 5 / 59),                             # tc counts no padding
])
def test_theoretical_goodput_against_hand_arithmetic(args, expected):
    assert theoretical_goodput_mbps(*args) == pytest.approx(expected, rel=1e-12)


def test_theoretical_goodput_keywords():
    assert theoretical_goodput_mbps(10, 1460, ip_version=4, framing="tc", timestamps=True) == \
        pytest.approx(9.564068692206077)


def test_the_note_figures_sit_on_the_model():
    # kernel-and-uml.md: tbf gave 0.96 / 9.58 / 95.5 / 956 Mbit/s at 1 / 10 / 100 / 1000 Mbit
    for rate, seen in ((1, 0.96), (10, 9.58), (100, 95.5), (1000, 956)):
        assert 0.99 < seen / theoretical_goodput_mbps(rate, 1460) < 1.01


@pytest.mark.parametrize("args,match", [
    ((0, 1460), "rate_mbit must be > 0"),
    ((10, 1460, 5), "ip_version must be 4 or 6"),
    ((10, 1460, 4, "atm"), "framing must be one of tc, ethernet"),
    ((10, 12), r"mss must be an integer in 13\.\.65535"),
    ((10, 1460.0), "mss must be an integer"),
])
def test_theoretical_goodput_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        theoretical_goodput_mbps(*args)


# -- the tbf message (pyroute2 encoding, no kernel) ---------------------------------------------

def test_tbf_message_carries_exact_bursts_overhead_and_peak(monkeypatch):
    from pyroute2.netlink.rtnl.tcmsg import sched_tbf, tcmsg

    # pyroute2 caches compiled attribute maps per class and subclasses inherit the cache:
    # build the parent classes first (as any qdisc dump does) so a stale map would show
    tcmsg()
    sched_tbf.options()
    monkeypatch.setattr(shaping, "_TBF_MESSAGE_CLASS", None)
    op = plan_shaping(ShapingSpec(10, framing="ethernet"), 1500)[0]
    msg = shaping._tbf_message()
    msg["index"], msg["handle"], msg["parent"] = 7, op.handle, op.parent
    msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", shaping._tbf_options(op.params)]]
    msg.encode()
    back = type(msg)(msg.data)
    back.decode()
    opts = back.get_attr("TCA_OPTIONS")
    assert opts.get_attr("TCA_TBF_BURST") == 6_152
    assert opts.get_attr("TCA_TBF_PBURST") == 3027
    parms = opts.get_attr("TCA_TBF_PARMS")
    assert (parms["rate"], parms["limit"]) == (1_250_000, 62_500 + 6_152)
    assert (parms["rate_overhead"], parms["rate_mpu"]) == (24, 84)
    assert (parms["peak"], parms["peak_overhead"]) == (2**32 - 1, 24)
    # the legacy bucket size in 64 ns ticks: 6152 B at 1.25 MB/s = 4921.6 us; pyroute2 (like
    # tc) truncates to whole us: 4921 us * 15.625 ticks/us = 76890.6 -> 76890
    assert parms["buffer"] == 76_890


def test_tc_framing_tbf_message_has_the_frame_splitting_peak_too():
    op = plan_shaping(ShapingSpec(1000), 1500)[0]
    opts = shaping._tbf_options(op.params)
    names = [a[0] for a in opts["attrs"]]
    assert names == ["TCA_TBF_PARMS", "TCA_TBF_RTAB", "TCA_TBF_BURST", "TCA_TBF_PTAB", "TCA_TBF_PBURST"]
    assert (opts["attrs"][0][1]["peak"], opts["attrs"][0][1]["peak_overhead"]) == (2**32 - 1, 0)


# -- apply: what reaches pyroute2, and what happens on failure (a fake IPRoute, no kernel) ------

class FakeNetlinkMessage(dict):
    def get_attr(self, name):
        return self["attrs"][name]


class FakeIPRoute:
    """Records tc calls; ``fail`` maps a tc kind ("tbf", "netem", "add-class") to (errno, kernel text)."""

    calls: ClassVar[list] = []
    fail: ClassVar[dict] = {}
    root = ("noqueue", 0)

    def __init__(self, netns=None, ext_ack=False):
        assert ext_ack, "the kernel's reasons are wanted"
        self.netns = netns

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def link_lookup(self, ifname):
        return [5] if ifname == "itbabcdefa" else []

    def get_links(self, index):
        return [FakeNetlinkMessage(attrs={"IFLA_MTU": 1500})]

    def get_qdiscs(self, index):
        kind, handle = self.root
        return [FakeNetlinkMessage(parent=TC_H_ROOT, handle=handle, attrs={"TCA_KIND": kind})]

    def _maybe_fail(self, key):
        from pyroute2.netlink.exceptions import NetlinkError
        if key in self.fail:
            raise NetlinkError(*self.fail[key])

    def tc(self, command, kind=None, **kwargs):
        FakeIPRoute.calls.append((command, kind, kwargs))
        self._maybe_fail(command if command == "add-class" else kind)

    def nlm_request_batch(self, msgs):
        FakeIPRoute.calls.append(("add", "tbf", {"handle": msgs[0]["handle"], "parent": msgs[0]["parent"]}))
        self._maybe_fail("tbf")


@pytest.fixture
def fake_ipr(monkeypatch):
    from testbed import netns

    monkeypatch.setattr(netns, "iproute", lambda ns, ext_ack=False: FakeIPRoute(netns=ns, ext_ack=ext_ack))
    monkeypatch.setattr(FakeIPRoute, "calls", [])
    monkeypatch.setattr(FakeIPRoute, "fail", {})
    monkeypatch.setattr(FakeIPRoute, "root", ("noqueue", 0))
    return FakeIPRoute


def test_apply_sends_the_plan_in_order(fake_ipr):
    ops = apply_shaping("itb-abcdef-a", "itbabcdefa", ShapingSpec(10, qdisc="htb", delay_ms=5), burst_time_s=0.004)
    assert [(c[0], c[1]) for c in fake_ipr.calls] == [("add", "netem"), ("add", "htb"), ("add-class", "htb"),
                                                      ("add", "pfifo")]
    netem = fake_ipr.calls[0][2]
    assert (netem["delay"], netem["loss"], netem["index"], netem["parent"]) == (5000, 0.0, 5, TC_H_ROOT)
    cls = fake_ipr.calls[2][2]
    assert (cls["rate"], cls["burst"], cls["quantum"], cls["handle"]) == (1_250_000, 6_056, 125_000, 0x20010)
    assert ops == plan_shaping(ShapingSpec(10, qdisc="htb", delay_ms=5), 1500, 0.004)


def test_missing_netem_fails_before_anything_is_added(fake_ipr):
    fake_ipr.fail = {"netem": (errno.ENOENT, "Specified qdisc kind is unknown")}
    with pytest.raises(ShapingError) as info:
        apply_shaping("itb-abcdef-a", "itbabcdefa", ShapingSpec(10, delay_ms=20))
    assert "netem (CONFIG_NET_SCH_NETEM) is not in this kernel: delay/loss need it; run with --kernel uml" \
        in str(info.value)
    assert info.value.op.kind == "netem" and info.value.errno == errno.ENOENT
    assert [(c[0], c[1]) for c in fake_ipr.calls] == [("add", "netem")]   # the refused add, nothing else


def test_missing_tbf_is_named(fake_ipr):
    fake_ipr.fail = {"tbf": (errno.ENOENT, "Specified qdisc kind is unknown")}
    with pytest.raises(ShapingError, match=r"tbf \(CONFIG_NET_SCH_TBF\) is not in this kernel"):
        apply_shaping("itb-abcdef-a", "itbabcdefa", ShapingSpec(10))


def test_a_later_failure_removes_what_was_added(fake_ipr):
    fake_ipr.fail = {"add-class": (errno.EINVAL, "Invalid argument")}
    with pytest.raises(ShapingError, match=r"class add dev itbabcdefa parent 1: classid 1:10 htb .*"
                                           r"the kernel refused it: Invalid argument \(EINVAL\)"):
        apply_shaping("itb-abcdef-a", "itbabcdefa", ShapingSpec(10, qdisc="htb"))
    assert [(c[0], c[1]) for c in fake_ipr.calls] == [("add", "htb"), ("add-class", "htb"), ("del", None)]
    assert fake_ipr.calls[-1][2] == {"index": 5, "handle": ROOT_HANDLE, "root": True}


def test_apply_refuses_a_shaped_interface_and_unknown_names(fake_ipr):
    fake_ipr.root = ("tbf", 0x10000)
    with pytest.raises(ShapingError, match=r"already has a root qdisc \(tbf 1:\): remove_shaping\(\) first"):
        apply_shaping("itb-abcdef-a", "itbabcdefa", ShapingSpec(10))
    with pytest.raises(ShapingError, match="no such interface"):
        apply_shaping("itb-abcdef-a", "itbnonea", ShapingSpec(10))
    assert fake_ipr.calls == []


def test_remove_deletes_only_the_testbeds_root(fake_ipr):
    assert remove_shaping("itb-abcdef-a", "itbabcdefa") is False          # noqueue: nothing to do
    fake_ipr.root = ("fq_codel", 0x80000)
    with pytest.raises(ShapingError, match="the root qdisc is fq_codel 8:, not one apply_shaping"):
        remove_shaping("itb-abcdef-a", "itbabcdefa")
    assert fake_ipr.calls == []
    fake_ipr.root = ("netem", 0x10000)
    assert remove_shaping("itb-abcdef-a", "itbabcdefa") is True
    assert fake_ipr.calls == [("del", None, {"index": 5, "handle": ROOT_HANDLE, "root": True})]


@pytest.mark.parametrize("target,message,missing", [
    ("qdisc", "Specified qdisc kind is unknown", True),
    ("qdisc", "", True),                                   # no extended ack: ENOENT on a qdisc
    ("qdisc", "Failed to find specified qdisc", False),    # a missing parent, not a missing kind
    ("class", "No such file or directory", False),
])
def test_enoent_means_a_missing_qdisc_only_when_the_kernel_says_so(target, message, missing):
    from pyroute2.netlink.exceptions import NetlinkError

    op = TcOp(target, "htb", 0x10010, 0x10000)
    assert shaping._is_missing_qdisc(op, NetlinkError(errno.ENOENT, message) if message
                                     else NetlinkError(errno.ENOENT)) is missing
    assert shaping._is_missing_qdisc(op, NetlinkError(errno.EINVAL, message)) is False
