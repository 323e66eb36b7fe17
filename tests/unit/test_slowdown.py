"""The ESP slowdown (ipsec.slowdown), arms of an A/B within a sweep and the injection's arithmetic,
without root: the BPF program is run by a small classic-BPF interpreter written here from the
instruction set's definition (linux/filter.h), on real packet headers built by scapy."""
import dataclasses
import math

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP
from scapy.layers.l2 import Ether

from analysis.regress import RegressError, arm_records, arms, compare_arms
from experiments import injection
from experiments.engine.plan import SweepSpec, plan_points, plan_round
from ipsec import slowdown
from testbed.record import FIELD, Record, point_key


def run_cbpf(prog, packet: bytes) -> tuple[int, int]:
    """(return value, instructions executed) of a classic BPF program on ``packet``."""
    a, pc, executed = 0, 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        executed += 1
        if code == 0x28:
            a = int.from_bytes(packet[k:k + 2], "big")
        elif code == 0x30:
            a = packet[k]
        elif code == 0x15:
            pc += jt if a == k else jf
        elif code == 0x05:
            pc += k
        elif code == 0x04:
            a = (a + k) & 0xFFFFFFFF
        elif code == 0x06:
            return k, executed
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


ESP4 = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / ESP(spi=1, seq=1, data=b"x" * 40))
ESP6 = bytes(Ether() / IPv6(src="fd00::1", dst="fd00::2") / ESP(spi=1, seq=1, data=b"x" * 40))
TCP4 = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP())
TCP6 = bytes(Ether() / IPv6(src="fd00::1", dst="fd00::2") / TCP())


@pytest.mark.parametrize("burn", [0, 1, 7, slowdown.CHUNK])
def test_esp_packets_pay_the_burn_and_nothing_matches(burn):
    prog = slowdown.program(burn)
    for packet in (ESP4, ESP6):
        value, executed = run_cbpf(prog, packet)
        assert value == 0  # no match: the packet goes on unclassified
        assert executed == 5 + burn + 1  # the header test, the burn, the return
    for packet in (TCP4, TCP6):
        value, executed = run_cbpf(prog, packet)
        assert value == 0 and executed == 7  # plain traffic: the header test only, whatever the burn


def test_bytecode_is_what_tc_takes_and_fits_its_message():
    text = slowdown.bytecode(slowdown.CHUNK)
    count, *insns = text.split(",")
    assert int(count) == len(insns) == slowdown.CHUNK + 9
    assert insns[0] == "40 0 0 12" and insns[-1] == "6 0 0 0"
    # iproute2 packs 8 bytes per instruction into a 16 KiB message, with headers
    assert 8 * int(count) < 16384 - 512


def test_chunks_spread_and_bound_the_cost():
    assert slowdown.chunks(0) == []
    assert slowdown.chunks(slowdown.CHUNK) == [slowdown.CHUNK]
    assert slowdown.chunks(2 * slowdown.CHUNK + 5) == [slowdown.CHUNK, slowdown.CHUNK, 5]
    assert sum(slowdown.chunks(12345)) == 12345
    for bad in (-1, slowdown.MAX_INSTRUCTIONS + 1, 1.5, True):
        with pytest.raises(ValueError):
            slowdown.chunks(bad)
    text = slowdown.batch(["eth0", "eth1"], slowdown.CHUNK + 1)
    assert text.count("qdisc add dev") == 2 and text.count("filter add dev eth0 egress pref") == 2
    assert "pref 2 bpf bytecode \"10," in text  # the second filter burns 1


def test_every_arm_carries_the_same_chain_and_differs_in_the_burn_alone():
    # arm a (0) carries the chain arm b (3000) takes, burning nothing in it: what the filters themselves cost
    # (the clsact qdisc, each filter's call and header tests) is the same in both arms
    assert slowdown.chunks(0, 2) == [0, 0] and slowdown.chunks(3000, 2) == [slowdown.CHUNK, 1100]
    assert slowdown.filters_for((0, 3000)) == 2 and slowdown.filters_for(()) == 0
    text = slowdown.batch(["eth0"], 0, 2)
    assert text.count("filter add dev eth0 egress") == 2 and text.count('bytecode "9,') == 2  # header tests only
    assert SweepSpec(profiles=("aes-gcm-256",), arms=(0, 3000)).arm_chain == 2
    # the two guests of regress --ab --inject-slowdown, one arm each, carry one chain
    assert SweepSpec(profiles=("aes-gcm-256",), arms=(0,), arm_filters=2).arm_chain == 2
    with pytest.raises(ValueError, match="arm_filters"):
        SweepSpec(arm_filters=-1)


def test_arms_sit_side_by_side_in_abba_order_and_plain_has_none():
    spec = SweepSpec(profiles=("aes-gcm-256",), rates_mbit=(50,), sizes=(1460,), repetitions=2, arms=(0, 3000))
    points = plan_points(spec)
    assert [(p.profile, p.arm, p.repetition) for p in points] == [
        ("none", "", 0), ("aes-gcm-256", "a", 0), ("aes-gcm-256", "b", 0),
        ("aes-gcm-256", "b", 1), ("aes-gcm-256", "a", 1), ("none", "", 1)]
    assert spec.arm_instructions("b") == 3000 and spec.arm_instructions("") == 0
    assert len({p.key() for p in points}) == len(points)
    # a record's arm is part of its point; a record without one is the plain (armless) point
    assert FIELD.arm not in points[0].fields() and points[1].fields()[FIELD.arm] == "a"
    assert point_key(points[0].fields()) == points[0].point_key()


def test_a_sweep_without_plain_and_bad_arms():
    spec = SweepSpec(profiles=("aes-gcm-256",), plain=False, rates_mbit=(50,), sizes=(1460,), repetitions=1,
                     arms=(0, 0, 10))
    assert spec.profiles == ("aes-gcm-256",)
    assert [p.arm for p in plan_round(spec, 50, 0)] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="at least one IPsec profile"):
        SweepSpec(profiles=("none",), plain=False)
    with pytest.raises(ValueError, match="extra instructions"):
        SweepSpec(arms=(0, -5))
    with pytest.raises(ValueError, match="at most 8 arms"):
        SweepSpec(arms=tuple(range(9)))


def arm_run(a_values, b_values, rate=1000.0, metric="cpu_us_per_packet", b_insns=3000):
    records = []
    for arm, values, insns in (("a", a_values, 0), ("b", b_values, b_insns)):
        for rep, v in enumerate(values):
            records.append(Record(topology="vpn_gateway", profile="aes-gcm-256", mode="tunnel", ip_version=4,
                                  transport="tcp", rate_mbit=rate, size_bytes=1460, size_mode="mss", clients=1,
                                  arm=arm, repetition=rep, injected_instructions=insns, goodput_mbps=1000 / v,
                                  bound="cpu", **{metric: v}))
    return records


def test_arms_are_compared_as_a_run_with_its_baseline():
    records = arm_run([50, 51, 49, 50, 50.5], [55, 56, 54, 55, 55.5])
    assert arms(records) == ["a", "b"] and all(r.arm == "" for r in arm_records(records, "b"))
    verdicts = compare_arms(records, {}, metrics=("goodput_mbps", "cpu_us_per_packet"), max_drop=0.01)
    assert {v.metric: v.regressed for v in verdicts} == {"goodput_mbps": True, "cpu_us_per_packet": True}
    same = compare_arms(arm_run([50, 51, 49, 50], [50.5, 49.5, 50, 50.2]), {}, max_drop=0.01,
                        metrics=("cpu_us_per_packet",))
    assert not any(v.regressed for v in same)
    with pytest.raises(RegressError, match="no arm 'c'"):
        compare_arms(records, {}, "a", "c")


def test_calibration_turns_a_measured_cost_into_instructions():
    records = arm_run([50.0, 50.2, 49.8, 50.0], [60.0, 60.3, 59.7, 60.0], b_insns=6000)
    cal = injection.calibrate_from(records, "uml:x", "detect")
    assert math.isclose(cal.us_per_packet, 50.0) and math.isclose(cal.us_per_instruction, 10 / 6000, rel_tol=1e-3)
    assert cal.instructions_for(5) == 1500 and cal.instructions_for(0) == 0
    assert "1000 Mbit/s" in cal.point
    e = injection.effect(records, "b")
    assert math.isclose(e.pct, 20.0, abs_tol=0.01) and e.low < e.ratio < e.high and e.instructions == 6000
    with pytest.raises(injection.InjectionError, match="could not measure"):
        injection.calibrate_from(arm_run([50, 52, 48, 50], [50, 52, 48, 50.1], b_insns=6000), "k", "s")
    with pytest.raises(injection.InjectionError, match="at most"):
        dataclasses.replace(cal, us_per_instruction=1e-6).instructions_for(10)
    assert cal.unit == "µs" and "ns per extra instruction" in cal.describe()


def test_a_counted_calibration_is_in_instructions_and_near_what_it_plants():
    counted = [dataclasses.replace(r, clock="instructions", instructions_per_packet=r.cpu_us_per_packet * 1000,
                                   cpu_us_per_packet=None)
               for r in arm_run([59.0, 59.1, 58.9, 59.0], [60.3, 60.4, 60.2, 60.3], b_insns=500)]
    cal = injection.calibrate_from(counted, "qemu:x", "counted")
    assert cal.unit == "instructions" and math.isclose(cal.us_per_packet, 59_000)
    assert math.isclose(cal.us_per_instruction, 1300 / 500, rel_tol=1e-3)  # guest instructions per BPF one
    assert cal.instructions_for(1) == round(590 / 2.6) and "instructions of the guest" in cal.describe()
    assert injection.calibration_instructions("instructions") == injection.COUNTED_CALIBRATION_INSTRUCTIONS < \
        injection.calibration_instructions("time") == injection.CALIBRATION_INSTRUCTIONS


def test_calibrations_are_cached_per_kernel_and_suite(tmp_path):
    cal = injection.calibrate_from(arm_run([50.0, 50.2, 49.8], [60.0, 60.3, 59.7], b_insns=6000), "k1", "detect")
    path = str(tmp_path / "injection.json")
    injection.save_calibration(cal, path)
    assert injection.load_calibration("k1", "detect", path) == cal
    assert injection.load_calibration("k2", "detect", path) is None
    assert injection.load_calibration("k1", "detect", str(tmp_path / "none.json")) is None


def test_pairs_cancel_a_drift_that_hides_a_change_from_the_means():
    drift = [40, 44, 48, 52, 56, 52, 48, 44, 40, 44]  # the machine's speed wanders by 40 %
    records = arm_run(drift, [v * 1.05 for v in drift])  # arm b costs 5 % more at every moment
    paired = compare_arms(records, {}, max_drop=0.01, metrics=("cpu_us_per_packet",))
    unpaired = compare_arms(records, {}, max_drop=0.01, metrics=("cpu_us_per_packet",), paired=False)
    assert paired[0].regressed and math.isclose(paired[0].ratio, 1.05)
    assert not unpaired[0].regressed  # the drift swamps the means
    assert paired[0].low2 <= paired[0].ratio <= paired[0].high2
    # identical arms: a ratio of 1 and nothing flagged
    same = compare_arms(arm_run(drift, [v * (1 + 0.002 * (-1) ** i) for i, v in enumerate(drift)]), {},
                        max_drop=0.01, metrics=("cpu_us_per_packet", "goodput_mbps"))
    assert not any(v.regressed for v in same)
