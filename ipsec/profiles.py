"""Profiles: which tunnel protects the traffic, and with which transforms, by name (pure data, stdlib only).

A profile name is built from parts joined with ``+``::

    none                                no tunnel (the baseline every sweep includes)
    wireguard                           WireGuard (ChaCha20-Poly1305 in UDP, Curve25519 keys): a tunnel
                                        kind of its own, never combined with the IPsec parts
    aes-gcm-256                         ESP, AES-GCM (RFC 4106), 16-byte ICV
    aes-gcm-128-icv8                    ... with an 8-byte ICV (icv8, icv12, icv16)
    aes-ccm-128, aes-ccm-256-icv8       ESP, AES-CCM (RFC 4309), ICV as AES-GCM's
    chacha20-poly1305                   ESP, ChaCha20-Poly1305 (RFC 7634)
    aes-gmac-128, aes-gmac-256          ESP, integrity only: AES-GMAC (RFC 4543), payload in the clear
    aes-cbc-128-sha1                    ESP, AES-CBC + HMAC-SHA1-96  (also -sha256 = HMAC-SHA256-128,
                                        -sha384, -sha512 (RFC 4868), -md5)
    aes-ctr-128-sha256                  ESP, AES-CTR (RFC 3686) + HMAC; 128, 192 or 256
    3des-cbc-sha1, des-cbc-md5, ...     ESP, 3DES/DES-CBC + HMAC
    null-sha1                           ESP, no encryption, HMAC-SHA1-96 (seed 000 annex)
    ah-sha1                             AH alone (also ah-md5, ah-sha256)
    3des-cbc-sha1+ah-md5                ESP and AH together (seed 001)
    null-sha1+ipcomp                    IPComp (deflate) inside ESP (seed 000 annex)

Transforms are applied innermost first: IPComp, then ESP, then AH.  In tunnel mode
the innermost transform builds the outer header and the others run in transport
mode on top of it, as the kernel's policy templates expect.
"""
from __future__ import annotations

import dataclasses
import re

from ipsec.algorithms import ALGORITHMS, get_algorithm

#: Profile words of the integrity algorithms -> catalog names ("sha1" -> "hmac-sha1-96").
AUTHS: dict[str, str] = {a.profile_name: a.name for a in ALGORITHMS if a.kind == "auth" and a.profile_name}


def _ciphers() -> dict[str, tuple[str, int | None]]:
    """Profile words of the ESP ciphers -> (catalog name, key bits or None for the only size); the word
    names the cipher's key without its salt (``aes-ctr-128``: 160 bits with AES-CTR's nonce)."""
    out: dict[str, tuple[str, int | None]] = {}
    for a in ALGORITHMS:
        if a.kind == "crypt" and a.profile_name:
            if len(a.key_bits_allowed) > 1:
                out.update({f"{a.profile_name}-{bits - a.salt_bits}": (a.name, bits) for bits in a.key_bits_allowed})
            else:
                out[a.profile_name] = (a.name, None)
    return out


CIPHERS: dict[str, tuple[str, int | None]] = _ciphers()
_AEADS = [a for a in ALGORITHMS if a.kind == "aead"]
_ICVS = sorted({bits // 8 for a in _AEADS for bits in a.icv_bits_allowed})
_GCM = re.compile(rf"^({'|'.join(map(re.escape, (a.name for a in _AEADS)))})"
                  rf"(?:-icv({'|'.join(map(str, _ICVS))}))?$")
_CBC = re.compile(rf"^({'|'.join(map(re.escape, CIPHERS))})-({'|'.join(AUTHS)})$")
_AH = re.compile(rf"^ah-({'|'.join(AUTHS)})$")

_SHORT_ICVS = [a.name for a in _AEADS if len(a.icv_bits_allowed) > 1]
#: The WireGuard profile's name: a tunnel of its own kind (:mod:`ipsec.wireguard`), never stacked.
WIREGUARD = "wireguard"

GRAMMAR = ("none | wireguard | ESP[+ah-AUTH][+ipcomp] | ah-AUTH[+ipcomp] | ipcomp, where ESP is an AEAD "
           f"({', '.join(a.name for a in _AEADS)}; "
           f"{', '.join(sorted({n.rsplit('-', 1)[0] for n in _SHORT_ICVS}))} take "
           f"-icv{{{','.join(map(str, _ICVS))}}}) or CIPHER-AUTH with "
           f"CIPHER in {', '.join(CIPHERS)} and AUTH in {', '.join(AUTHS)}")


@dataclasses.dataclass(frozen=True)
class Profile:
    """The transforms of one profile; build it with :func:`parse_profile`.

    Attributes are catalog names from :mod:`ipsec.algorithms` (or None when unused).
    """

    name: str
    aead: str | None = None
    aead_icv_bits: int | None = None
    crypt: str | None = None
    crypt_key_bits: int | None = None
    esp_auth: str | None = None
    ah_auth: str | None = None
    ipcomp: bool = False
    wireguard: bool = False

    @property
    def esp(self) -> bool:
        return self.aead is not None or self.crypt is not None

    @property
    def protocols(self) -> tuple[str, ...]:
        """What protects the traffic, in the order applied: the xfrm protocols innermost (``comp``) first,
        or ``wireguard`` alone.  Each is also the kernel capability the profile needs (``experiments.doctor``)."""
        if self.wireguard:
            return ("wireguard",)
        return tuple(p for p, on in (("comp", self.ipcomp), ("esp", self.esp), ("ah", self.ah_auth is not None)) if on)

    @property
    def ipsec(self) -> bool:
        """Whether IPsec protects the traffic (not the plain baseline, not WireGuard)."""
        return bool(self.protocols) and not self.wireguard

    @property
    def is_none(self) -> bool:
        return not self.protocols

    def describe(self) -> str:
        """A sentence for tables and reports."""
        if self.is_none:
            return "no IPsec"
        if self.wireguard:
            return "WireGuard (ChaCha20-Poly1305 in UDP, Curve25519 keys)"
        parts = []
        if self.ipcomp:
            parts.append("IPComp deflate")
        if self.aead:
            icv = f", {self.aead_icv_bits // 8}-byte ICV" if self.aead_icv_bits else ""
            parts.append(f"ESP {self.aead.upper()}{icv}")
        elif self.crypt:
            salt = get_algorithm(self.crypt).salt_bits
            bits = f"-{self.crypt_key_bits - salt}" if self.crypt_key_bits else ""
            parts.append(f"ESP {self.crypt.upper()}{bits} + {self.esp_auth.upper()}")
        if self.ah_auth:
            parts.append(f"AH {self.ah_auth.upper()}")
        return ", then ".join(parts)


def parse_profile(name: str) -> Profile:
    """The :class:`Profile` called ``name``; ValueError explains the grammar otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"profile must be a name like aes-gcm-256 or none ({GRAMMAR}), not {name!r}")
    text = name.strip().lower()
    if text == "none":
        return Profile("none")
    if text == WIREGUARD:
        return Profile(WIREGUARD, wireguard=True)
    if WIREGUARD in text.split("+"):
        raise ValueError(f"profile {name!r}: WireGuard is a tunnel of its own and takes no ESP, AH or IPComp "
                         "beside it; give wireguard alone")
    fields: dict = {}
    seen: set[str] = set()
    for part in text.split("+"):
        kind, values = _part(part, text)
        if kind in seen:
            raise ValueError(f"profile {name!r} has two {kind} parts; give each of ESP, AH and ipcomp at most once")
        seen.add(kind)
        fields.update(values)
    return Profile(name=text, **fields)


def _part(part: str, whole: str) -> tuple[str, dict]:
    if part == "ipcomp":
        return "ipcomp", {"ipcomp": True}
    m = _GCM.match(part)
    if m:
        icv = int(m.group(2)) * 8 if m.group(2) else None
        allowed = get_algorithm(m.group(1)).icv_bits_allowed
        if icv is not None and icv not in allowed:
            raise ValueError(f"profile part {part!r} in {whole!r}: {m.group(1)}'s ICV is "
                             f"{' or '.join(f'{b // 8}' for b in allowed)} bytes, not {icv // 8}")
        return "ESP", {"aead": m.group(1), "aead_icv_bits": icv}
    m = _CBC.match(part)
    if m:
        crypt, bits = CIPHERS[m.group(1)]
        return "ESP", {"crypt": crypt, "crypt_key_bits": bits, "esp_auth": AUTHS[m.group(2)]}
    m = _AH.match(part)
    if m:
        return "AH", {"ah_auth": AUTHS[m.group(1)]}
    hint = ""
    if part.startswith("aes-gcm"):
        hint = " (AES-GCM key sizes are 128, 192, 256 and ICVs icv8, icv12, icv16)"
    elif part.startswith(("aes-ccm", "aes-gmac")):
        hint = " (AES-CCM and AES-GMAC key sizes are 128 and 256)"
    elif part.startswith(("aes-cbc", "aes-ctr", "3des", "des", "null")):
        cipher = next((c for c in sorted(CIPHERS, key=len, reverse=True) if part.startswith(c)), None)
        hint = (f" (an ESP cipher needs an integrity algorithm: {', '.join(AUTHS)}, e.g. {cipher}-sha256)" if cipher
                else f" (the ESP ciphers are {', '.join(CIPHERS)})")
    raise ValueError(f"unknown profile part {part!r} in {whole!r}{hint}; profiles are {GRAMMAR}")


@dataclasses.dataclass(frozen=True)
class Named:
    """A profile the seeds used, with where it comes from."""

    name: str
    source: str


#: The profiles the reproduced experiments use (``ipsec-testbed profiles`` lists them);
#: any other name that follows the grammar works too.
CATALOG: tuple[Named, ...] = (
    Named("none", "every seed's baseline"),
    Named("aes-gcm-128", "RFC 4106 (AES-128 variant of seed 000's cipher)"),
    Named("aes-gcm-192", "RFC 4106"),
    Named("aes-gcm-256", "seed 000 (IKEv2 tunnel mode, \"AES GCM 256\")"),
    Named("aes-gcm-256-icv8", "RFC 4106 with an 8-byte ICV"),
    Named("aes-gcm-256-icv12", "RFC 4106 with a 12-byte ICV"),
    Named("aes-cbc-128-sha1", "seed 002 (AES-128 + HMAC-SHA1)"),
    Named("aes-cbc-192-sha1", "seed 002 (AES-192 + HMAC-SHA1)"),
    Named("aes-cbc-256-sha1", "seed 002 (AES-256 + HMAC-SHA1)"),
    Named("aes-cbc-128-sha256", "RFC 4868 HMAC-SHA256-128"),
    Named("aes-cbc-256-sha256", "RFC 4868 HMAC-SHA256-128"),
    Named("aes-cbc-128-md5", "seeds 003 and 004 (AES + HMAC-MD5; key size not stated)"),
    Named("aes-cbc-256-md5", "AES-256 + HMAC-MD5"),
    Named("3des-cbc-sha1", "seeds 001 and 002 (3DES + HMAC-SHA1)"),
    Named("3des-cbc-md5", "3DES + HMAC-MD5"),
    Named("des-cbc-sha1", "seed 002 (DES + HMAC-SHA1)"),
    Named("des-cbc-md5", "seed 004 (DES + HMAC-MD5)"),
    Named("null-sha1", "seed 000 annex (phase2alg=null-sha1)"),
    Named("ah-sha1", "AH alone"),
    Named("ah-md5", "AH alone (seed 001's AH algorithm)"),
    Named("3des-cbc-sha1+ah-md5", "seed 001 (ESP 3DES/HMAC-SHA1 and AH HMAC-MD5, transport)"),
    Named("null-sha1+ipcomp", "seed 000 annex (compress=yes)"),
    Named("aes-gcm-256+ipcomp", "AES-GCM-256 with IPComp"),
    Named("chacha20-poly1305", "RFC 7634 (ChaCha20-Poly1305, WireGuard's cipher, in ESP)"),
    Named("aes-ccm-128", "RFC 4309 (AES-CCM, 16-byte ICV)"),
    Named("aes-ccm-256-icv8", "RFC 4309 with an 8-byte ICV"),
    Named("aes-gmac-128", "RFC 4543 (integrity only: the payload travels in the clear)"),
    Named("aes-gmac-256", "RFC 4543"),
    Named("aes-ctr-128-sha256", "RFC 3686 (AES-CTR) + RFC 4868 HMAC-SHA256-128"),
    Named("aes-cbc-256-sha384", "RFC 4868 HMAC-SHA384-192"),
    Named("aes-cbc-256-sha512", "RFC 4868 HMAC-SHA512-256"),
    Named("wireguard", "WireGuard (not IPsec: ChaCha20-Poly1305 in UDP, Curve25519), the tunnel compared with ESP"),
)


def catalog() -> tuple[tuple[Profile, str], ...]:
    """Every cataloged profile, parsed, with its source."""
    return tuple((parse_profile(n.name), n.source) for n in CATALOG)
