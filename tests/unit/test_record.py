"""testbed.record: the one definition of a result record, its point, its bounds and the usable rule."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from experiments.engine.plan import Point
from testbed import record, recordpage
from testbed.record import (
    FIELDS,
    KEY_FIELDS,
    POINT_FIELDS,
    Bound,
    Keying,
    Record,
    Tunnel,
    point_key,
    record_key,
    usable,
)

FIXTURE = Path(__file__).parent / "fixtures" / "rundir-schema1" / "results.jsonl"


def stored() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def test_a_stored_run_reads_into_records_and_writes_back_the_same_line():
    for line in stored():
        rec = Record.from_json(line)
        written = rec.to_json()
        # nothing dropped, no arm where there was none; added only what records have gained since
        assert {k: v for k, v in written.items() if k in line} == line
        assert {k: v for k, v in written.items() if k not in line} == \
            {"keying": "static", **({"tunnel": "ipsec"} if line["profile"] != "none" else {})}
        assert rec.bound is Bound(line["bound"]) and json.dumps(written["bound"]) == json.dumps(line["bound"])


def test_an_unknown_field_is_refused_by_name_and_the_files_schema_is_not_a_field():
    line = stored()[0]
    assert Record.from_json({**line, "schema": 2}) == Record.from_json(line)
    with pytest.raises(ValueError, match="goodput_mpbs"):
        Record.from_json({**line, "goodput_mpbs": 1.0})


def test_the_point_is_the_plans_point_and_the_key_adds_the_repetition():
    assert tuple(f.name for f in dataclasses.fields(Point)) == KEY_FIELDS
    assert (*POINT_FIELDS, "repetition") == KEY_FIELDS and set(KEY_FIELDS) <= set(FIELDS)
    line = stored()[0]
    assert record_key(line) == (*point_key(line), line["repetition"])
    assert point_key(line)[POINT_FIELDS.index("arm")] == ""  # a run without arms: arm ""


def test_an_arm_and_its_instruction_count_are_written_even_when_zero():
    rec = Record(**Point("vpn_gateway", "aes-gcm-256", "tunnel", 4, "tcp", 1000.0, 1460, "mss", 1, "a", 0).fields(),
                 injected_instructions=0, goodput_mbps=500.0)
    out = rec.to_json()
    assert out["arm"] == "a" and out["injected_instructions"] == 0 and "error" not in out


def test_a_failed_point_keeps_its_identity_and_why():
    point = Point("host_to_host", "none", "transport", 6, "udp", 10.0, 1000, "datagram", 2, "", 3).fields()
    out = Record.failure(point, 2, "iperf3 exited 1; iperf3 exited 1", duration_s=2.0).to_json()
    assert out["failed"] and out["attempts"] == 2 and out["goodput_mbps"] is None and out["bound"] is None
    assert point_key(out) == point_key(point) and not usable(out)


@pytest.mark.parametrize(("change", "counts"), [
    ({}, True),
    ({"bound": "cpu"}, True),
    ({"bound": "other"}, True),
    ({"bound": "anomaly"}, False),
    ({"failed": True}, False),
    ({"goodput_mbps": None}, False),
    ({"bound": None}, True),  # a run from before the monitor
])
def test_the_usable_rule(change, counts):
    assert usable({**stored()[0], **change}) is counts


def test_bounds_are_their_own_strings_and_know_whether_they_count():
    assert [b.value for b in Bound] == ["link", "cpu", "other", "anomaly"]
    assert json.dumps({"bound": Bound.CPU}) == '{"bound": "cpu"}' and Bound.CPU == "cpu"
    assert [b for b in Bound if not b.counted] == [Bound.ANOMALY]
    assert record.CAUTION_ORDER[0] is Bound.CPU and set(record.CAUTION_ORDER) == set(Bound)
    assert Bound.CPU.label == "CPU" and Bound.LINK.label == "link"


def test_a_records_bound_is_the_bound_its_text_names_and_an_unknown_one_is_refused():
    line = stored()[0]
    assert Record.from_json({**line, "bound": "cpu"}).bound is Bound.CPU
    assert Record(bound="other").bound is Bound.OTHER and Record(bound="").bound is None
    assert dataclasses.replace(Record(), bound="anomaly").bound is Bound.ANOMALY
    assert json.dumps(Record(bound="cpu").to_json()["bound"]) == '"cpu"'
    with pytest.raises(ValueError, match="bound 'nonsense': not one of link, cpu, other, anomaly"):
        Record.from_json({**line, "bound": "nonsense"})


def test_docs_records_md_is_what_the_record_says():
    assert recordpage.PAGE.read_text() == recordpage.render(), \
        "docs/records.md is out of date: run `.venv/bin/python -m cli.pages` and commit it"
    page = recordpage.PAGE.read_text()
    assert all(f"| `{name}` |" in page for name in FIELDS)


def test_keyings_are_their_own_strings_and_the_command_lines_choices():
    from ipsec import ike

    assert [k.value for k in Keying] == list(ike.KEYINGS) == ["static", "ike", "ike-rsa"]
    assert [k for k in Keying if k.negotiated] == [Keying.IKE, Keying.IKE_RSA]
    assert all(ike.is_ike(k) is k.negotiated and ike.is_ike(k.value) is k.negotiated for k in Keying)
    assert ike.auth_of("ike-rsa") == ike.auth_of(Keying.IKE_RSA) == "pubkey"
    assert Keying.named("ike") is Keying.IKE and f"{Keying.IKE_RSA}" == "ike-rsa"
    with pytest.raises(ValueError, match="keying must be one of static, ike, ike-rsa, not 'ikev1'"):
        Keying.named("ikev1")


def test_a_records_keying_is_a_keying_written_as_its_name():
    line = stored()[0]
    assert Record.from_json(line).keying is Keying.STATIC  # a run from before IKE: static
    rec = Record.from_json({**line, "keying": "ike-rsa"})
    assert rec.keying is Keying.IKE_RSA and json.dumps(rec.to_json()["keying"]) == '"ike-rsa"'
    with pytest.raises(ValueError, match="keying must be one of"):
        Record.from_json({**line, "keying": "manual"})


def test_the_tunnel_is_the_profiles_and_the_plain_baseline_has_none():
    assert [t.value for t in Tunnel] == ["ipsec", "wireguard"]
    assert Tunnel.of(record.PLAIN_PROFILE) is None and Tunnel.of("aes-gcm-256") is Tunnel.IPSEC
    assert Tunnel.of("wireguard") is Tunnel.WIREGUARD
    assert Record(profile="none").tunnel is None and Record(profile="3des-cbc-sha1+ah-md5").tunnel is Tunnel.IPSEC
    # a results.jsonl line says it for its readers, and the record read back is the same
    assert Record(profile="wireguard").to_json()["tunnel"] == "wireguard"
    assert Record(profile="aes-gcm-256").to_json()["tunnel"] == "ipsec"
    assert "tunnel" not in Record(profile="none").to_json()
    for r in (Record(profile="wireguard"), Record(profile="none"), Record(profile="aes-gcm-256")):
        assert Record.from_json(r.to_json()) == r
    with pytest.raises(ValueError, match="is not what profile"):
        Record.from_json({**Record(profile="aes-gcm-256").to_json(), "tunnel": "wireguard"})
