"""Keying by IKEv2: a strongSwan daemon (charon) in each IPsec endpoint's namespace.

The static path (:mod:`ipsec.plan`) writes SAs and policies into the kernel over netlink; this
one lets a real IKEv2 exchange make them, as seeds 000 (IKEv2), 002 (isakmpd) and 004 (Pluto)
keyed their tunnels.  strongSwan is the daemon because it is driven entirely through files and
a control socket that can all live in a private directory: its configuration file is named by
``STRONGSWAN_CONF``, its control socket (vici) and its log are set there, and ``swanctl`` reads
its connections and secrets from ``SWANCTL_DIR``.  Only its pid file is fixed (``/run/charon.pid``),
so each daemon runs with a private ``/run``: ``ip netns exec`` gives the process a mount namespace
of its own, in which the daemon's directory is bound over ``/run``.  Nothing is written to
``/etc`` or to the host's ``/run``.

- :func:`child_proposals` -- the ESP or AH proposal of a CHILD_SA that negotiates a profile, or
  :class:`Unsupported` saying why IKEv2 cannot (pure).
- :func:`strongswan_conf`, :func:`swanctl_conf` -- a daemon's files (pure).
- :class:`Daemons` -- the daemons of one network: one per namespace that ends an association,
  their tunnels brought up (:meth:`Daemons.up`) and down, every file and credential in one
  owner-only directory (:func:`base_dir`) removed at the end.

Two ways to authenticate, as ``--keying`` names them: ``ike``, a pre-shared key per association,
and ``ike-rsa``, RSA signatures as seed 000's tunnel (``authby=rsasig``): an RSA key pair per
daemon (3072 bits), each peer given the other's public key, no certificate.  Either is made from
the system's secure random source for each :meth:`Daemons.up`; it lives only in that owner-only
directory and is never logged.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ipsec.algorithms import get_algorithm
from ipsec.plan import AssociationSpec
from ipsec.profiles import Profile
from testbed import names, record, waiting
from testbed.errors import Refused

if TYPE_CHECKING:
    from ipsec.xfrm.state import SAState

log = logging.getLogger(__name__)

#: How an IPsec network gets its SAs (:class:`testbed.record.Keying`'s names, ``--keying``'s choices):
#: written over netlink (the default, :mod:`ipsec.plan`), or negotiated by IKEv2 daemons (this module).
KEYINGS = tuple(k.value for k in record.Keying)
#: How the IKE daemons of each keying authenticate each other (strongSwan's ``auth`` setting).
IKE_AUTH = {record.Keying.IKE: "psk", record.Keying.IKE_RSA: "pubkey"}
#: The RSA keys of ``ike-rsa``, one pair per daemon.
RSA_BITS = 3072
#: What ``--keying`` offers, for the commands' help.
KEYING_HELP = ("static writes the SAs into the kernel over netlink; ike starts strongSwan's IKEv2 daemon in each "
               "IPsec endpoint's namespace and lets it negotiate them, authenticated by a pre-shared key made per "
               "run; ike-rsa the same with RSA signatures (a 3072-bit key pair per daemon, made per run), as seed "
               "000's tunnel; profiles IKEv2 cannot express are refused")

CHARON = "/usr/lib/ipsec/charon"
SWANCTL = "swanctl"
#: The Debian packages that hold them (``./run install`` installs them, their services masked).
PACKAGES = ("strongswan-charon", "strongswan-swanctl", "libstrongswan-standard-plugins")
#: The plugin that does the IKE_SA's ECP-256 and most of the ciphers.
OPENSSL_PLUGIN = "/usr/lib/ipsec/plugins/libstrongswan-openssl.so"

#: The IKE_SA's own proposal: AES-256-CBC, HMAC-SHA-256, PRF SHA-256, ECP-256 (all by OpenSSL).
IKE_PROPOSAL = "aes256-sha256-prfsha256-ecp256"
#: The plugins a daemon loads: no more, so it reads nothing else (no stroke: it would want
#: /etc/ipsec.secrets and /run/charon.ctl).
PLUGINS = ("random nonce aes sha1 sha2 md5 hmac kdf gmp openssl pem pkcs1 x509 revocation constraints pubkey "
           "kernel-netlink socket-default vici")
#: A peer that does not answer is given up after about 14 s (strongSwan's default is 165 s):
#: retransmissions 3 and 7.5 s after the first request, given up at 14.25 s.  Not shorter: with
#: a 1-s first timeout, 100 road warriors initiating at once against one gateway on one UML CPU
#: had an IKE_SA_INIT retransmitted before its answer came, and one tunnel failed its
#: authentication (MAC mismatched); with 3 s and 4 s all came up.
RETRANSMIT = {"retransmit_tries": 2, "retransmit_timeout": 3.0, "retransmit_base": 1.5}
#: ... and the first timeout grows by this much per peer of the busiest daemon beyond the first:
#: a gateway answers simultaneous IKE_SA_INITs one after another, about 0.1 s each on one UML CPU
#: (100 road warriors all at once: 10.8 s), and 200 at once with 3 s failed as 100 had with 1 s.
RETRANSMIT_S_PER_PEER = 0.1


def retransmit_settings(crowd: int = 1) -> dict[str, float]:
    """strongSwan's retransmission settings where the busiest daemon has ``crowd`` peers."""
    return {**RETRANSMIT,
            "retransmit_timeout": RETRANSMIT["retransmit_timeout"] + RETRANSMIT_S_PER_PEER * max(0, crowd - 1)}
#: How long a daemon may take to open its control socket, and a tunnel to come up.
START_TIMEOUT_S = 30.0
INITIATE_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0

#: Catalog names -> strongSwan's proposal keywords.


class Unsupported(Refused):
    """A profile IKEv2 (as strongSwan speaks it) cannot negotiate; the message says why."""


class IkeError(RuntimeError):
    """A daemon did not start, or a tunnel did not come up; the message names the cause in one line."""


def is_ike(keying: record.Keying | str) -> bool:
    """Whether ``keying`` (one of :data:`KEYINGS`) is a negotiated one."""
    return keying in IKE_AUTH


def describe_keying(keying: record.Keying | str) -> str:
    """``keyed by IKEv2 (RSA signatures)``, ``... (a pre-shared key)``, or ``keyed statically``."""
    if not is_ike(keying):
        return "keyed statically"
    return f"keyed by IKEv2 ({'RSA signatures' if auth_of(keying) == 'pubkey' else 'a pre-shared key'})"


def auth_of(keying: record.Keying | str) -> str:
    """The daemons' ``auth`` for ``keying`` (``psk`` or ``pubkey``); ValueError for another keying."""
    try:
        return IKE_AUTH[keying]
    except KeyError:
        raise ValueError(f"keying must be one of {', '.join(IKE_AUTH)}, not {keying!r}") from None


def child_proposals(profile: Profile) -> dict[str, str]:
    """The proposal settings of a CHILD_SA that negotiates ``profile`` (``esp_proposals`` or
    ``ah_proposals``, and ``ipcomp``), or :class:`Unsupported`.

    The proposals carry no DH group: the CHILD_SA made with the IKE_SA takes its keys from it.
    """
    if not (profile.esp or profile.ah_auth):
        raise Unsupported(f"profile {profile.name}: nothing for IKE to negotiate (no ESP, no AH)")
    if profile.esp and profile.ah_auth:
        raise Unsupported(f"profile {profile.name}: IKEv2 negotiates one protocol per CHILD_SA, ESP or AH "
                          "(RFC 7296 3.3.1), and strongSwan no ESP-and-AH bundle; key it statically")
    out: dict[str, str] = {}
    if profile.aead:
        alg = get_algorithm(profile.aead)
        out["esp_proposals"] = _keyword(alg, alg.key_bits, profile.aead_icv_bits or alg.icv_bits)
    elif profile.crypt:
        crypt = get_algorithm(profile.crypt)
        bits = profile.crypt_key_bits or crypt.key_bits
        out["esp_proposals"] = f"{_keyword(crypt, bits)}-{_keyword(get_algorithm(profile.esp_auth))}"
    else:
        out["ah_proposals"] = _keyword(get_algorithm(profile.ah_auth))
    if profile.ipcomp:
        out["ipcomp"] = "yes"
    return out


def _keyword(alg, key_bits: int | None = None, icv_bits: int | None = None) -> str:
    """strongSwan's proposal keyword for ``alg`` (:attr:`ipsec.algorithms.Algorithm.ike_name`) with a key of
    ``key_bits`` (its salt included) and an ICV of ``icv_bits``."""
    if not alg.ike_name:
        raise Unsupported(f"{alg.name}: no IKEv2 proposal keyword for it here; key it statically")
    bits = (key_bits or alg.key_bits) - alg.salt_bits
    return alg.ike_name.format(bits=bits, icv_bytes=(icv_bits or alg.icv_bits) // 8)


@dataclasses.dataclass(frozen=True)
class Tunnel:
    """One association as one daemon sees it: its own end and the peer's."""

    name: str
    spec: AssociationSpec
    local: str  # "a" or "b": which end of the association this daemon is
    psk: str = dataclasses.field(repr=False)  # "" with auth pubkey
    auth: str = "psk"  # or "pubkey": each daemon's RSA key, named after its namespace

    @property
    def me(self):
        return self.spec.a if self.local == "a" else self.spec.b

    @property
    def peer(self):
        return self.spec.b if self.local == "a" else self.spec.a

    def identity(self, end) -> str:
        """The IKE identity of ``end`` (:attr:`me` or :attr:`peer`): its address with a PSK; with
        RSA keys an e-mail-style name (seed 000's ``leftid=cyber7@rshome.lan``), ``<namespace>@testbed``."""
        return end.address if self.auth == "psk" else f"{end.ns}@testbed"


def strongswan_conf(state_dir: str, crowd: int = 1) -> str:
    """The daemon's own settings: its plugins, its control socket and log in ``state_dir``, no
    routes of its own (the network routes), no MOBIKE or UDP encapsulation (ESP goes on the wire
    as ESP), and a quick end to retransmissions, later with a ``crowd`` of peers at one daemon
    (:func:`retransmit_settings`)."""
    retransmit = "\n".join(f"  {k} = {v:g}" for k, v in retransmit_settings(crowd).items())
    return f"""charon {{
  load = {PLUGINS}
  install_routes = no
  install_virtual_ip = no
{retransmit}
  plugins {{
    vici {{
      socket = unix://{state_dir}/charon.vici
    }}
  }}
  syslog {{
    daemon {{
      default = -1
    }}
  }}
  filelog {{
    log {{
      path = {state_dir}/charon.log
      time_format = %H:%M:%S
      ike_name = yes
      default = 1
      flush_line = yes
    }}
  }}
}}
swanctl {{
  load = random nonce openssl pem pkcs1 x509 pubkey
}}
"""


def _auth_round(t: Tunnel, end) -> str:
    lines = [f"auth = {t.auth}", f"id = {t.identity(end)}"]
    if t.auth == "pubkey":
        lines.append(f"pubkeys = {end.ns}.pem")
    return "\n".join(f"      {line}" for line in lines)


def swanctl_conf(tunnels: Sequence[Tunnel], on_demand: bool = False) -> str:
    """The connections and pre-shared keys of one daemon (with RSA keys: the files in its
    ``rsa`` and ``pubkey`` directories, named after the namespaces, hold them).  ``on_demand``: the
    initiating side's children start as trap policies, so that the first packet they cover makes the
    kernel ask the daemon for SAs (an ACQUIRE) and the daemon negotiates them then."""
    conns, keys = [], []
    for t in tunnels:
        start_action = "trap" if on_demand and t.local == "a" else "none"
        child = "\n".join(f"        {k} = {v}" for k, v in child_proposals(t.spec.profile).items())
        conns.append(f"""  {t.name} {{
    version = 2
    local_addrs = {t.me.address}
    remote_addrs = {t.peer.address}
    proposals = {IKE_PROPOSAL}
    mobike = no
    encap = no
    rekey_time = 0
    local {{
{_auth_round(t, t.me)}
    }}
    remote {{
{_auth_round(t, t.peer)}
    }}
    children {{
      {t.name} {{
        mode = {t.spec.mode}
        local_ts = {t.me.subnet}
        remote_ts = {t.peer.subnet}
{child}
        start_action = {start_action}
        rekey_time = 0
        life_time = 0
      }}
    }}
  }}""")
        if t.auth == "psk":
            keys.append(f"""  ike-{t.name} {{
    id-1 = {t.me.address}
    id-2 = {t.peer.address}
    secret = 0x{t.psk}
  }}""")
    return "connections {\n" + "\n".join(conns) + "\n}\nsecrets {\n" + "\n".join(keys) + "\n}\n"


#: The lines of a daemon's log or swanctl's output that say why a tunnel failed, most telling first.
_CAUSES = (r"MAC mismatched", r"AUTHENTICATION_FAILED", r"NO_PROPOSAL_CHOSEN", r"no acceptable proposal",
           r"unable to add SAD entry", r"unable to install", r"peer not responding", r"giving up after",
           r"invalid value", r"config discarded", r"failed", r"error")


def cause(*texts: str) -> str | None:
    """The most telling line about a failure in ``texts`` (logs, command output), stripped of its
    timestamp; None when none says anything."""
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    for pattern in _CAUSES:
        for line in lines:
            if re.search(pattern, line, re.IGNORECASE):
                return re.sub(r"^\d\d:\d\d:\d\d\s+", "", line)
    return None


class Daemon:
    """One charon in one namespace, with its files in ``state_dir`` (owner-only)."""

    def __init__(self, ns: str, state_dir: str, tunnels: Sequence[Tunnel], crowd: int = 1,
                 on_demand: bool = False) -> None:
        self.ns, self.dir, self.tunnels = ns, state_dir, tuple(tunnels)
        self.proc: subprocess.Popen | None = None
        os.makedirs(os.path.join(state_dir, "run"), mode=0o700, exist_ok=True)
        swanctl_dir = os.path.join(state_dir, "swanctl")
        for sub in ("", "x509", "x509ca", "private", "pubkey", "rsa", "ecdsa", "pkcs8", "pkcs12"):
            os.makedirs(os.path.join(swanctl_dir, sub), mode=0o700, exist_ok=True)
        _write_private(os.path.join(state_dir, "strongswan.conf"), strongswan_conf(state_dir, crowd))
        _write_private(os.path.join(swanctl_dir, "swanctl.conf"), swanctl_conf(self.tunnels, on_demand))

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "STRONGSWAN_CONF": os.path.join(self.dir, "strongswan.conf"),
                "SWANCTL_DIR": os.path.join(self.dir, "swanctl")}

    @property
    def socket(self) -> str:
        return os.path.join(self.dir, "charon.vici")

    @property
    def log_text(self) -> str:
        with contextlib.suppress(OSError), open(os.path.join(self.dir, "charon.log"), errors="replace") as f:
            return f.read()
        return ""

    def start(self) -> None:
        """Start the daemon (it opens its control socket in :meth:`wait_started`)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)  # charon removes a stale socket itself, but the wait would see it first
        out = open(os.path.join(self.dir, "charon.out"), "wb")  # noqa: SIM115 (the daemon's, closed below)
        try:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, "sh", "-c", 'mount --bind "$0/run" /run && exec "$1"',
                 self.dir, CHARON], env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        finally:
            out.close()

    def wait_started(self, timeout_s: float | None = None) -> None:
        """Until the daemon accepts connections on its control socket (the file exists from its
        ``bind``, before its ``listen``), at most ``timeout_s`` (:data:`START_TIMEOUT_S`)."""
        timeout_s = START_TIMEOUT_S if timeout_s is None else timeout_s
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                said = ""
                with contextlib.suppress(OSError), open(os.path.join(self.dir, "charon.out"), errors="replace") as f:
                    said = f.read().strip()
                why = cause(said, self.log_text) or (said.splitlines() or [f"exit status {self.proc.returncode}"])[-1]
                raise IkeError(f"charon in {self.ns} ended at its start: {why}")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(self.socket)
                except OSError:
                    return False
            return True
        try:
            waiting.until(ready, timeout_s, f"charon in {self.ns} to open its control socket", interval_s=0.02)
        except TimeoutError as e:
            why = cause(self.log_text)  # a daemon that runs but cannot serve says why in its log
            raise IkeError(f"{e}; its log says: {why}" if why else str(e)) from None

    def swanctl_argv(self, *args: str) -> list[str]:
        """The command line of ``swanctl ARGS`` against this daemon (run from the host's namespace:
        the socket is a file), with :attr:`env`."""
        return [SWANCTL, *args, "--uri", f"unix://{self.socket}"]

    def swanctl(self, *args: str, timeout_s: float = INITIATE_TIMEOUT_S) -> subprocess.CompletedProcess:
        """``swanctl ARGS`` against this daemon; :class:`IkeError` when it does not answer in ``timeout_s``."""
        try:
            return subprocess.run(self.swanctl_argv(*args), env=self.env,
                                  capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise IkeError(f"swanctl {' '.join(args)} got no answer from charon in {self.ns} "
                           f"in {timeout_s:g} s") from None

    def load(self) -> None:
        done = self.swanctl("--load-all", "--noprompt")
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
            raise IkeError(f"charon in {self.ns} refused its configuration: "
                           f"{cause(done.stdout, done.stderr, self.log_text) or last}")

    def terminate(self) -> None:
        """Ask the daemon to stop (SIGTERM: it deletes its SAs and policies and tells its peers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """:meth:`terminate` and wait; a daemon that lingers is killed, and what it left in the
        kernel (SAs, policies: its namespace is the run's own) is flushed."""
        self.terminate()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("charon in %s did not stop in %g s; killed, and its SAs and policies flushed",
                        self.ns, timeout_s)
            proc.kill()
            proc.wait()
            from ipsec.xfrm import XfrmSocket  # netlink (pyroute2): the sweep's parser imports this module

            with XfrmSocket(self.ns) as x:
                x.flush_policy()
                x.flush_sa()


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def tunnels_for(specs: Iterable[AssociationSpec], auth: str = "psk") -> list[Tunnel]:
    """Both ends of every association, named ``t0``, ``t1``, ..., each pair with a fresh
    pre-shared key from the system's secure random source (none with ``auth`` pubkey: the
    daemons' RSA keys are made when they start)."""
    if auth not in IKE_AUTH.values():
        raise ValueError(f"auth must be one of {', '.join(IKE_AUTH.values())}, not {auth!r}")
    out = []
    for i, spec in enumerate(specs):
        psk = secrets.token_hex(32) if auth == "psk" else ""
        out += [Tunnel(f"t{i}", spec, side, psk, auth) for side in ("a", "b")]
    return out


def make_rsa_keys(daemons: Sequence[Daemon]) -> None:
    """An RSA key pair for every daemon that authenticates by public key: the private key in its
    own ``rsa`` directory, the public one in its ``pubkey`` directory and in each of its peers'
    (files named after the namespace, owner-only)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    public: dict[str, bytes] = {}
    for d in daemons:
        if not any(t.auth == "pubkey" for t in d.tunnels):
            continue
        key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
        _write_private(os.path.join(d.dir, "swanctl", "rsa", f"{d.ns}.pem"), key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()).decode())
        public[d.ns] = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo)
    for d in daemons:
        for ns in {d.ns} | {t.peer.ns for t in d.tunnels if t.auth == "pubkey"}:
            if ns in public:
                _write_private(os.path.join(d.dir, "swanctl", "pubkey", f"{ns}.pem"), public[ns].decode())


class Daemons:
    """The IKE daemons of one network's associations: :meth:`up` brings every tunnel up (side
    ``a`` initiates), :meth:`down` stops the daemons and removes their directory."""

    def __init__(self, run_id: str, auth: str = "psk") -> None:
        self.run_id = run_id
        self.auth = auth
        self.dir: str | None = None
        self.daemons: list[Daemon] = []

    def up(self, specs: Iterable[AssociationSpec]) -> None:
        """Bring every association up: fresh credentials (:attr:`auth`), side ``a`` initiating."""
        self.bring_up(tunnels_for(specs, self.auth))

    def bring_up(self, tunnels: Sequence[Tunnel]) -> None:
        """Start a daemon in every namespace ``tunnels`` end in, and bring each tunnel up from its
        ``a`` side, one after another; :class:`IkeError` names the cause of the first that does
        not come up."""
        self.start(tunnels)
        for t in self.initiators:
            self.initiate(t)

    def start(self, tunnels: Sequence[Tunnel], on_demand: bool = False) -> None:
        """Start the daemons of ``tunnels`` (one per namespace) with their configuration loaded,
        no tunnel up yet; ``on_demand``: each initiator's trap policies in its kernel, waiting for the
        first packet (:func:`swanctl_conf`)."""
        for t in tunnels:
            child_proposals(t.spec.profile)  # refuse before anything starts
        self.down()
        self.dir = tempfile.mkdtemp(prefix=names.ike_dir_prefix(self.run_id), dir=names.ike_base_dir())  # owner-only
        by_ns: dict[str, list[Tunnel]] = {}
        for t in tunnels:
            by_ns.setdefault(t.me.ns, []).append(t)
        crowd = max((len(ts) for ts in by_ns.values()), default=1)  # every daemon waits as the busiest's peers must
        self.daemons = [Daemon(ns, os.path.join(self.dir, ns), ts, crowd, on_demand) for ns, ts in by_ns.items()]
        make_rsa_keys(self.daemons)
        for d in self.daemons:
            d.start()
        for d in self.daemons:
            d.wait_started()
            d.load()

    @property
    def initiators(self) -> list[Tunnel]:
        """The ``a`` side of every tunnel of the daemons started."""
        return [t for d in self.daemons for t in d.tunnels if t.local == "a"]

    def daemon(self, ns: str) -> Daemon:
        """The daemon started in namespace ``ns``."""
        return next(d for d in self.daemons if d.ns == ns)

    def initiate(self, tunnel: Tunnel) -> float:
        """Bring ``tunnel`` up from its side; the seconds from the request to the CHILD_SA installed."""
        t0 = time.monotonic()
        done = self.daemon(tunnel.me.ns).swanctl("--initiate", "--child", tunnel.name,
                                                  "--timeout", str(int(INITIATE_TIMEOUT_S)),
                                                  timeout_s=INITIATE_TIMEOUT_S + 5)
        took = time.monotonic() - t0
        if done.returncode:
            raise self.failure(tunnel, done)
        return took

    def initiate_together(self, tunnels: Sequence[Tunnel]) -> float:
        """Bring ``tunnels`` up all at once; the seconds from the requests to the last one up."""
        return self._together(tunnels, lambda t: ("--initiate", "--child", t.name,
                                                  "--timeout", str(int(INITIATE_TIMEOUT_S))))[1]

    def rekey_together(self, tunnels: Sequence[Tunnel], timeout_s: float = INITIATE_TIMEOUT_S) -> float:
        """Rekey the CHILD_SA of every one of ``tunnels`` at once, from its side; the seconds from
        the requests until the kernel at both ends of every tunnel holds the new CHILD_SA's SAs
        (an inbound and an outbound SA with SPIs it did not hold before).  The old outbound SA goes
        at once; strongSwan keeps the old inbound one 5 s longer, for packets still in flight
        (``charon.delete_rekeyed_delay``)."""
        wanted = [(ns, frozenset((t.me.address, t.peer.address))) for t in tunnels for ns in (t.me.ns, t.peer.ns)]
        ends = sorted({ns for ns, _ in wanted})
        before = {ns: self._ipsec_spis(ns) for ns in ends}
        t0, _ = self._together(tunnels, lambda t: ("--rekey", "--child", t.name))

        def replaced() -> bool:
            now = {ns: self._ipsec_spis(ns) for ns in ends}
            return all(len(now[ns].get(pair, set()) - before[ns].get(pair, set())) >= 2 for ns, pair in wanted)
        try:
            waiting.until(replaced, timeout_s, f"{len(tunnels)} CHILD_SA rekeys to complete", interval_s=0.01)
        except TimeoutError as e:
            raise IkeError(f"{e}: {cause(*(d.log_text for d in self.daemons)) or 'no reason in the logs'}") from None
        return time.monotonic() - t0

    def _ipsec_spis(self, ns: str) -> dict[frozenset[str], set[int]]:
        """The ESP and AH SPIs in namespace ``ns``, by the pair of addresses their SAs join."""
        from ipsec.xfrm import XfrmSocket  # netlink (pyroute2): the sweep's parser imports this module

        out: dict[frozenset[str], set[int]] = {}
        with XfrmSocket(ns) as x:
            for sa in x.dump_sa():
                if sa.proto in ("esp", "ah"):
                    out.setdefault(frozenset((sa.src, sa.dst)), set()).add(sa.spi)
        return out

    def _together(self, tunnels: Sequence[Tunnel], args_of) -> tuple[float, float]:
        """Run ``swanctl ARGS`` (``args_of(tunnel)``) for every one of ``tunnels`` at once: the
        release's time (``time.monotonic()``) and the seconds from it until the last has answered,
        or the first failure as :class:`IkeError`.

        Every ``swanctl`` is started first and held before it connects (starting a process takes
        a tenth of a second inside User-Mode Linux); the clock starts when all are let go together.
        """
        procs: list[tuple[Tunnel, subprocess.Popen]] = []
        try:
            for t in tunnels:
                d = self.daemon(t.me.ns)
                argv = d.swanctl_argv(*args_of(t))
                procs.append((t, subprocess.Popen(["sh", "-c", 'read go && exec "$@"', "held", *argv], env=d.env,
                                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True)))
            t0 = time.monotonic()
            for _, proc in procs:
                proc.stdin.write("go\n")
                proc.stdin.flush()
            failed = None
            for t, proc in procs:
                out, err = proc.communicate(timeout=INITIATE_TIMEOUT_S + 5)
                if proc.returncode and failed is None:
                    failed = self.failure(t, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
            took = time.monotonic() - t0
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        if failed:
            raise failed
        return t0, took

    def failure(self, tunnel: Tunnel, done: subprocess.CompletedProcess) -> IkeError:
        """Why ``tunnel`` did not come up, in one line: the most telling line of the initiator's
        output and of both daemons' logs (the responder's for a wrong key)."""
        me = self.daemon(tunnel.me.ns)
        peer_log = next((d.log_text for d in self.daemons if d.ns == tunnel.peer.ns), "")  # none: a peer elsewhere
        why = (cause(peer_log) if "AUTHENTICATION_FAILED" in done.stdout else None) \
            or cause(done.stdout, done.stderr, me.log_text, peer_log) or "no reason given"
        return IkeError(f"IKE tunnel {tunnel.me.address} -> {tunnel.peer.address} "
                        f"({tunnel.spec.profile.name}, {tunnel.spec.mode}) did not come up: {why}")

    def sas(self) -> list[str]:
        """The SAs in every daemon's namespace, as the kernel holds them, one line each: namespace,
        protocol, SPI, addresses, mode and algorithms (never keys)."""
        from ipsec.xfrm import XfrmSocket  # netlink (pyroute2): the sweep's parser imports this module

        out = []
        for d in self.daemons:
            with XfrmSocket(d.ns) as x:
                out += [f"{d.ns} {describe_sa(sa)}" for sa in x.dump_sa()]
        return out

    def down(self) -> None:
        """Stop every daemon (they delete their SAs and policies) and remove their files."""
        daemons, self.daemons = self.daemons, []
        try:
            for d in daemons:
                d.terminate()  # all at once: each takes a moment to say goodbye to its peers
            for d in daemons:
                d.stop()
        finally:
            if self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None


def describe_sa(sa: SAState) -> str:
    """One installed SA in a line, without its keys: ``esp 0xc1234567 10.0.0.1->10.0.0.2 tunnel
    rfc4106(gcm(aes))/288/icv128``."""
    algs = [f"{a.kernel_name}/{a.key_bits}" + (f"/icv{a.icv_bits}" if a.icv_bits else "")
            for a in (sa.aead, sa.crypt, sa.auth, sa.comp) if a is not None]
    return f"{sa.proto} {sa.spi:#010x} {sa.src}->{sa.dst} {sa.mode} {' '.join(algs)}"


def available() -> str | None:
    """None when strongSwan is installed, else what is missing (one line)."""
    missing = [p for p in (CHARON,) if not os.access(p, os.X_OK)]
    if not os.path.exists(OPENSSL_PLUGIN):
        missing.append(OPENSSL_PLUGIN)
    if not shutil.which(SWANCTL):
        missing.append(SWANCTL)
    if missing:
        return f"IKE keying needs strongSwan ({', '.join(missing)} missing): apt install {' '.join(PACKAGES)}"
    return None
