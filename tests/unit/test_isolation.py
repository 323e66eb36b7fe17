"""The root-namespace check: it names what changed, and it fails the block that changed it."""
import pytest

from testbed import isolation


def snap(**areas):
    base = {"qdiscs": "qdisc noqueue 0: dev lo root refcnt 2", "sysctls": "net.ipv4.ip_forward = 0",
            "IPv6 routes": "", "links, addresses, IPv4 routes, xfrm states and policies": "1: lo: <LOOPBACK,UP>"}
    return {**base, **areas}


def test_differences_name_the_area_and_the_line():
    before = snap()
    after = snap(sysctls="net.ipv4.ip_forward = 1",
                 qdiscs="qdisc noqueue 0: dev lo root refcnt 2\nqdisc tbf 1: dev eth0 root rate 10Mbit")
    assert isolation.differences(before, after) == [
        "qdiscs: + qdisc tbf 1: dev eth0 root rate 10Mbit",
        "sysctls: + net.ipv4.ip_forward = 1", "sysctls: - net.ipv4.ip_forward = 0"]
    assert isolation.differences(before, snap()) == []


def test_address_lifetimes_are_not_changes():
    a = "inet6 fd00::5/64 scope global dynamic\n       valid_lft 86396sec preferred_lft 14396sec"
    b = "inet6 fd00::5/64 scope global dynamic\n       valid_lft 86300sec preferred_lft 14300sec"
    assert isolation._VOLATILE.sub("", a) == isolation._VOLATILE.sub("", b)


def test_the_block_that_changed_something_fails(monkeypatch):
    shots = iter([snap(), snap(sysctls="net.ipv4.ip_forward = 1")])
    monkeypatch.setattr(isolation, "root_namespace_snapshot", lambda: next(shots))
    with pytest.raises(AssertionError, match=r"sysctls: \+ net.ipv4.ip_forward = 1"), \
            isolation.root_namespace_unchanged():
        pass
    shots = iter([snap(), snap()])
    with isolation.root_namespace_unchanged():
        pass
