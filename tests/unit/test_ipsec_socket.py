"""XfrmSocket logic without a kernel: refusals, batch rollback, error messages.

A fake netlink object stands in for the NETLINK_XFRM socket; it records every request
and answers with canned (real, captured) kernel messages or errors.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import logging
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipsec.sa import PolicySpec, SASpec, SelectorSpec, TemplateSpec, probe_spec
from ipsec.xfrm import (
    XFRM_MSG_DELPOLICY,
    XFRM_MSG_DELSA,
    XFRM_MSG_FLUSHPOLICY,
    XFRM_MSG_FLUSHSA,
    XFRM_MSG_GETPOLICY,
    XFRM_MSG_GETSA,
    XFRM_MSG_NEWPOLICY,
    XFRM_MSG_NEWSA,
    KernelError,
    XfrmError,
    XfrmSocket,
    decode_messages,
    error_for,
    plan_add_sa,
    plan_del_policy,
)
from ipsec.xfrm import batch as xfrm_batch

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "xfrm" / "iproute2.json").read_text())


def captured(name: str) -> list[Any]:
    return [m for d in FIXTURES[name]["replies"] for m in decode_messages(bytes.fromhex(d))]


class FakeNetlink:
    """Records requests; ``answer(n, msg_type)`` returns reply messages or raises."""

    def __init__(self, answer: Callable[[int, int], list[Any]] | None = None) -> None:
        self.sent: list[tuple[int, int, Any]] = []
        self.answer = answer or (lambda n, t: [])
        self.closed = False

    def nlm_request(self, msg: Any, msg_type: int, msg_flags: int) -> Iterator[Any]:
        self.sent.append((msg_type, msg_flags, msg))
        yield from self.answer(len(self.sent), msg_type)

    def close(self) -> None:
        self.closed = True

    @property
    def types(self) -> list[int]:
        return [t for t, _, _ in self.sent]


def fail_at(index: int, code: int, extack: str | None = None) -> Callable[[int, int], list[Any]]:
    def answer(n: int, msg_type: int) -> list[Any]:
        if n == index:
            raise KernelError(code, extack)
        return []
    return answer


SA_A = SASpec(src="10.0.0.1", dst="10.0.0.2", proto="esp", spi=0x100, reqid=1,
              aead="aes-gcm-128", aead_key=bytes(20))
SA_B = SASpec(src="10.0.0.2", dst="10.0.0.1", proto="esp", spi=0x101, reqid=1,
              aead="aes-gcm-128", aead_key=bytes(20))
SA_C = dataclasses.replace(SA_A, spi=0x102)
POLICY_OUT = PolicySpec(selector=SelectorSpec(src="10.0.0.1", dst="10.0.0.2"), direction="out",
                        templates=[TemplateSpec(reqid=1)])
POLICY_IN = PolicySpec(selector=SelectorSpec(src="10.0.0.2", dst="10.0.0.1"), direction="in",
                       templates=[TemplateSpec(reqid=1)])


# -- flush refusals --------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["flush_sa", "flush_policy"])
def test_flush_refused_without_named_namespace(method: str) -> None:
    netlink = FakeNetlink()
    xs = XfrmSocket._attach(netlink, netns=None)
    with pytest.raises(XfrmError, match="refused: this socket is not in a named network namespace"):
        getattr(xs, method)()
    assert netlink.sent == []


def test_flush_refused_when_the_named_namespace_is_the_root(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root-ns"
    root.touch()
    monkeypatch.setattr("ipsec.xfrm.apply.ROOT_NETNS", str(root))
    netlink = FakeNetlink()
    with pytest.raises(XfrmError, match="is the root network namespace"):
        XfrmSocket._attach(netlink, netns=str(root)).flush_sa()
    other = tmp_path / "itb-test-ns"
    other.touch()
    XfrmSocket._attach(netlink, netns=str(other)).flush_sa()
    XfrmSocket._attach(netlink, netns=str(other)).flush_policy()
    assert netlink.types == [XFRM_MSG_FLUSHSA, XFRM_MSG_FLUSHPOLICY]
    assert netlink.sent[0][2]["proto"] == 0  # every IPsec protocol


def test_flush_refused_when_the_check_is_impossible(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipsec.xfrm.apply.ROOT_NETNS", str(tmp_path / "missing"))
    ns = tmp_path / "ns"
    ns.touch()
    netlink = FakeNetlink()
    with pytest.raises(XfrmError, match="cannot check"):
        XfrmSocket._attach(netlink, netns=str(ns)).flush_policy()
    assert netlink.sent == []


def test_missing_namespace_is_an_xfrm_error() -> None:
    with pytest.raises(XfrmError, match=r"open netns itb-0000-nonexistent: no such network namespace "
                                        r"\(/run/netns/itb-0000-nonexistent does not exist\)") as info:
        XfrmSocket(netns="itb-0000-nonexistent")
    assert info.value.errno == errno.ENOENT


# -- batches: install and remove --------------------------------------------------------------
NLM_F_ACK, NLM_F_CAPPED, NLM_F_ACK_TLVS, NLMSG_ERROR = 0x4, 0x100, 0x200, 2


def error_message(seq: int, code: int, extack: str | None = None) -> bytes:
    """An NLMSG_ERROR as the kernel sends it to a socket with capped, extended acks."""
    flags = NLM_F_CAPPED
    tlvs = b""
    if extack:
        flags |= NLM_F_ACK_TLVS
        text = extack.encode() + b"\0"
        tlvs = struct.pack("=HH", 4 + len(text), 1) + text + bytes(-len(text) % 4)
    body = struct.pack("=i", -code) + struct.pack("=IHHII", 16, 0, 0, seq, 0) + tlvs
    return struct.pack("=IHHII", 16 + len(body), NLMSG_ERROR, flags, seq, 4242) + body


class FakeKernel:
    """A NETLINK_XFRM datagram socket that answers as the kernel's ``netlink_rcv_skb``:
    each message of a datagram in turn, an error when ``fail(n, type)`` (n counts every
    message received) gives an errno, an ack when the message asks for one."""

    def __init__(self, fail: Callable[[int, int], int | tuple[int, str] | None] | None = None,
                 send_error: OSError | None = None) -> None:
        self.fail = fail or (lambda n, t: None)
        self.send_error = send_error
        self.received: list[Any] = []  # the decoded messages, in order
        self.datagrams: list[list[Any]] = []
        self.queue: list[bytes] = []
        self.closed = False

    def getsockname(self) -> tuple[int, int]:
        return (4242, 0)

    def send(self, data: bytes) -> int:
        if self.send_error:
            raise self.send_error
        msgs = decode_messages(data)
        self.datagrams.append(msgs)
        for msg in msgs:
            self.received.append(msg)
            header = msg["header"]
            failure = self.fail(len(self.received), header["type"])
            code, extack = failure if isinstance(failure, tuple) else (failure, None)
            if code:
                self.queue.append(error_message(header["sequence_number"], code, extack))
            elif header["flags"] & NLM_F_ACK:
                self.queue.append(error_message(header["sequence_number"], 0))
        return len(data)

    def recv(self, bufsize: int) -> bytes:
        assert self.queue, "recv() with nothing to read would block forever"
        return self.queue.pop(0)

    def close(self) -> None:
        self.closed = True

    @property
    def types(self) -> list[int]:
        return [m["header"]["type"] for m in self.received]


def batch_socket(kernel: FakeKernel, netns: str | None = "x") -> XfrmSocket:
    return XfrmSocket._attach(FakeNetlink(), netns=netns, raw=kernel)


def test_install_sends_sas_then_policies_in_one_datagram_acked_once() -> None:
    kernel = FakeKernel()
    batch_socket(kernel).install([SA_A, SA_B], [POLICY_OUT, POLICY_IN])
    assert kernel.types == [XFRM_MSG_NEWSA, XFRM_MSG_NEWSA, XFRM_MSG_NEWPOLICY, XFRM_MSG_NEWPOLICY]
    assert len(kernel.datagrams) == 1
    assert [bool(m["header"]["flags"] & NLM_F_ACK) for m in kernel.received] == [False, False, False, True]
    assert [m["header"]["sequence_number"] for m in kernel.received] == [1, 2, 3, 4]
    assert kernel.queue == []  # every answer read


def test_install_rolls_back_what_it_installed() -> None:
    kernel = FakeKernel(lambda n, t: errno.EEXIST if n == 4 else None)  # the second policy fails
    with pytest.raises(XfrmError, match=r"^add_policy policy in 10.0.0.2/32 -> 10.0.0.1/32 .*EEXIST") as info:
        batch_socket(kernel).install([SA_A, SA_B], [POLICY_OUT, POLICY_IN])
    assert info.value.errno == errno.EEXIST
    undo = kernel.received[4:]
    assert [m["header"]["type"] for m in undo] == [XFRM_MSG_DELPOLICY, XFRM_MSG_DELSA, XFRM_MSG_DELSA]
    assert undo[0]["dir"] == 1  # the "out" policy that went in
    assert [m["spi"] for m in undo[1:]] == [0x101, 0x100]  # newest first


def test_install_keeps_going_after_a_failure_and_removes_only_what_went_in() -> None:
    kernel = FakeKernel(lambda n, t: (errno.ENOSYS, "Requested AEAD algorithm not found") if n == 1 else None)
    with pytest.raises(XfrmError, match=r"aes-gcm-128.*kernel says: Requested AEAD") as info:
        batch_socket(kernel).install([SA_A, SA_B], [POLICY_OUT])
    assert info.value.kernel_message == "Requested AEAD algorithm not found"
    undo = kernel.received[3:]
    assert [m["header"]["type"] for m in undo] == [XFRM_MSG_DELPOLICY, XFRM_MSG_DELSA]
    assert undo[1]["spi"] == 0x101  # SA_B went in; SA_A, which failed, is not deleted


def test_install_rollback_errors_do_not_hide_the_cause(caplog: pytest.LogCaptureFixture) -> None:
    def fail(n: int, msg_type: int) -> int | None:
        if n == 2 or msg_type == XFRM_MSG_DELSA:  # SA_B's add, then the rollback's deletes
            return errno.EINVAL if n == 2 else errno.ESRCH
        return None
    kernel = FakeKernel(fail)
    with caplog.at_level(logging.WARNING, logger="ipsec.xfrm"), pytest.raises(XfrmError) as info:
        batch_socket(kernel).install([SA_A, SA_B, SA_C])
    assert info.value.errno == errno.EINVAL
    assert "rollback: del_sa esp spi 0x00000102" in caplog.text


def test_batches_split_into_datagrams_each_acked_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipsec.xfrm.batch.MAX_MESSAGES", 2)
    kernel = FakeKernel(lambda n, t: errno.EEXIST if n == 3 else None)
    sas = [dataclasses.replace(SA_A, spi=0x200 + i) for i in range(5)]
    errors = batch_socket(kernel).batch([plan_add_sa(sa) for sa in sas])
    assert [len(d) for d in kernel.datagrams] == [2, 2, 1]
    assert [bool(m["header"]["flags"] & NLM_F_ACK) for m in kernel.received] == [False, True, False, True, True]
    assert [e.errno if e else None for e in errors] == [None, None, errno.EEXIST, None, None]
    assert "spi 0x00000202" in str(errors[2])


def test_frame_keeps_datagrams_under_the_byte_limit() -> None:
    requests = [plan_add_sa(dataclasses.replace(SA_A, spi=0x200 + i)) for i in range(10)]
    size = len(requests[0].encode())
    datagrams = xfrm_batch.frame(requests, first_seq=7, max_messages=64, max_bytes=3 * size + 1)
    assert [d.count for d in datagrams] == [3, 3, 3, 1]
    assert [(d.first, d.last) for d in datagrams][-1] == (16, 16)
    assert all(len(d.data) <= 3 * size for d in datagrams)
    alone = xfrm_batch.frame(requests[:2], first_seq=1, max_bytes=1)  # a request bigger than the limit
    assert [d.count for d in alone] == [1, 1]


def test_remove_deletes_policies_then_sas_and_reports_what_was_missing() -> None:
    kernel = FakeKernel(lambda n, t: errno.ENOENT if t == XFRM_MSG_DELPOLICY else None)
    with pytest.raises(XfrmError, match=r"^del_policy policy out .*ENOENT"):
        batch_socket(kernel).remove([SA_A, SA_B], [POLICY_OUT, POLICY_IN])
    assert kernel.types == [XFRM_MSG_DELPOLICY, XFRM_MSG_DELPOLICY, XFRM_MSG_DELSA, XFRM_MSG_DELSA]
    kernel = FakeKernel(lambda n, t: errno.ESRCH if t == XFRM_MSG_DELSA else errno.ENOENT)
    batch_socket(kernel).remove([SA_A], [POLICY_OUT], missing_ok=True)  # all gone already: fine
    kernel = FakeKernel(lambda n, t: errno.EPERM)
    with pytest.raises(XfrmError, match="EPERM"):
        batch_socket(kernel).remove([SA_A], missing_ok=True)


def test_a_failing_batch_socket_is_an_xfrm_error_saying_the_outcome_is_unknown() -> None:
    kernel = FakeKernel(send_error=OSError(errno.ENOBUFS, "No buffer space available"))
    with pytest.raises(XfrmError, match=r"netlink socket error: .*No buffer space.*unknown") as info:
        batch_socket(kernel).install([SA_A])
    assert info.value.errno == errno.ENOBUFS


def test_closed_socket_refuses_batches() -> None:
    kernel = FakeKernel()
    xs = batch_socket(kernel)
    xs.close()
    assert kernel.closed
    with pytest.raises(XfrmError, match="closed"):
        xs.remove([SA_A])


# -- requests and replies --------------------------------------------------------------------------
def test_get_sa_parses_the_kernel_reply() -> None:
    netlink = FakeNetlink(lambda n, t: captured("reply_get_sa_esp"))
    state = XfrmSocket._attach(netlink).get_sa("10.0.0.2", 0x100, "esp")
    assert (state.spi, state.packets, state.bytes) == (0x100, 3, 324)
    ((msg_type, flags, msg),) = netlink.sent
    assert (msg_type, flags, msg["spi"], msg["proto"]) == (XFRM_MSG_GETSA, 0x1, 0x100, 50)


def test_get_sa_missing_raises_esrch() -> None:
    netlink = FakeNetlink(fail_at(1, errno.ESRCH))
    with pytest.raises(XfrmError, match=r"get_sa esp spi 0x00000100 \* -> 10.0.0.2: .*no such SA") as info:
        XfrmSocket._attach(netlink).get_sa("10.0.0.2", 0x100, "esp")
    assert info.value.errno == errno.ESRCH


def test_dumps_skip_non_data_messages() -> None:
    netlink = FakeNetlink(lambda n, t: captured("reply_dump_sa" if t == XFRM_MSG_GETSA else "reply_dump_policy"))
    xs = XfrmSocket._attach(netlink)
    assert len(xs.dump_sa()) == 6
    assert [p.priority for p in xs.dump_policy()] == [2000, 1000, 100]
    assert [(t, f) for t, f, _ in netlink.sent] == [(XFRM_MSG_GETSA, 0x301), (XFRM_MSG_GETPOLICY, 0x301)]


def test_del_requests() -> None:
    netlink = FakeNetlink()
    xs = XfrmSocket._attach(netlink)
    xs.del_sa("fd00::2", 0x1234, "ah", src="fd00::1")
    xs.del_policy(POLICY_IN.selector, "in")
    (t1, _, sa_id), (t2, _, pol_id) = netlink.sent
    assert (t1, sa_id["proto"], sa_id["family"]) == (XFRM_MSG_DELSA, 51, 10)
    assert (t2, pol_id["dir"], pol_id["sel_prefixlen_s"]) == (XFRM_MSG_DELPOLICY, 0, 32)


def test_socket_errors_become_xfrm_errors() -> None:
    def answer(n: int, msg_type: int) -> list[Any]:
        raise OSError(errno.ENOBUFS, "No buffer space available")
    with pytest.raises(XfrmError, match=r"^dump_sa all SAs: netlink socket error: .*No buffer space") as info:
        XfrmSocket._attach(FakeNetlink(answer)).dump_sa()
    assert info.value.errno == errno.ENOBUFS


def test_context_manager_closes_and_closed_socket_raises() -> None:
    netlink = FakeNetlink()
    with XfrmSocket._attach(netlink) as xs:
        pass
    assert netlink.closed
    with pytest.raises(XfrmError, match="closed"):
        xs.add_sa(SA_A)


def test_bad_arguments_are_value_errors() -> None:
    xs = XfrmSocket._attach(FakeNetlink())
    with pytest.raises(ValueError, match="proto must be one of esp, ah, comp"):
        xs.del_sa("10.0.0.2", 0x100, "ipcomp")
    with pytest.raises(ValueError, match="spi must be an integer"):
        xs.get_sa("10.0.0.2", 0, "esp")
    with pytest.raises(ValueError, match="direction must be one of in, out, fwd"):
        xs.del_policy(POLICY_IN.selector, "both")


# -- error messages ------------------------------------------------------------------------------
def test_missing_algorithm_names_it_and_its_modules() -> None:
    spec = probe_spec("hmac-sha256-128")  # ESP null + hmac(sha256)
    # The text 6.1 sends for XFRMA_ALG_AUTH_TRUNC (seen in User-Mode Linux, modprobe off).
    error = error_for(plan_add_sa(spec), errno.ENOSYS, "Requested AUTH_TRUNC algorithm not found")
    assert isinstance(error, RuntimeError)
    text = str(error)
    assert text.startswith(f"add_sa {spec.describe()}: [ENOSYS]")
    assert "lacks algorithm hmac-sha256-128 (hmac(sha256))" in text
    assert "null" not in text.split("lacks")[1]
    assert error.missing_modules == ("hmac", "sha256_generic")
    assert error.kernel_message == "Requested AUTH_TRUNC algorithm not found"


def test_missing_algorithm_without_extack_lists_all_of_the_sa() -> None:
    spec = SASpec(src="10.0.0.1", dst="10.0.0.2", proto="esp", spi=0x100, crypt="3des-cbc",
                  crypt_key=bytes(24), auth="hmac-md5-96", auth_key=bytes(16))
    error = error_for(plan_add_sa(spec), errno.ENOSYS)
    assert "3des-cbc (cbc(des3_ede)), hmac-md5-96 (hmac(md5))" in str(error)
    assert error.missing_modules == ("cbc", "des_generic", "authenc", "echainiv", "hmac", "md5")


def test_uninstantiable_crypto_is_reported_with_modules() -> None:
    error = error_for(plan_add_sa(probe_spec("aes-gcm-256")), errno.ENOENT)
    assert "could not instantiate aes-gcm-256" in str(error) and "seqiv" in error.missing_modules


@pytest.mark.parametrize("spec, modules", [
    (probe_spec("aes-cbc"), ("esp4",)),
    (probe_spec("aes-cbc", family=6), ("esp6",)),
    (probe_spec("hmac-sha1-96", proto="ah"), ("ah4",)),
    (probe_spec("deflate"), ("ipcomp", "xfrm_ipcomp")),
    (SASpec(src="fd00::1", dst="fd00::2", proto="comp", spi=3, mode="tunnel", comp="deflate"),
     ("ipcomp6", "xfrm_ipcomp", "xfrm6_tunnel")),
])
def test_missing_protocol_names_its_module(spec: SASpec, modules: tuple[str, ...]) -> None:
    error = error_for(plan_add_sa(spec), errno.EPROTONOSUPPORT, "Requested type not found")
    assert f"lacks IPsec protocol {spec.proto} for IPv{spec.family}" in str(error)
    assert error.missing_modules == modules


def test_other_errors() -> None:
    assert "already installed" in str(error_for(plan_add_sa(SA_A), errno.EEXIST))
    assert "CAP_NET_ADMIN" in str(error_for(plan_add_sa(SA_A), errno.EPERM))
    error = error_for(plan_del_policy(POLICY_IN.selector, "in"), errno.ENOENT)
    assert str(error).startswith("del_policy policy in 10.0.0.2/32 -> 10.0.0.1/32: [ENOENT]")
    assert "no such SA or policy" in str(error) and error.missing_modules == ()
