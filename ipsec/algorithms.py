"""Catalog of the IPsec algorithms the testbed offers (pure data, standard library only).

Every algorithm has a user-facing name (``aes-gcm-256``, ``hmac-sha256-128``), the name
the Linux crypto API knows it by (``rfc4106(gcm(aes))``, ``hmac(sha256)``), its kind and
the numbers the kernel and the ESP overhead model need::

    kind   used as                     in xfrm as            example
    ----   -------                     ----------            -------
    aead   ESP combined mode           XFRMA_ALG_AEAD        aes-gcm-128 = rfc4106(gcm(aes)),
                                                             chacha20-poly1305 = rfc7539esp(chacha20,poly1305)
    crypt  ESP encryption              XFRMA_ALG_CRYPT       aes-cbc     = cbc(aes)
    auth   ESP or AH integrity         XFRMA_ALG_AUTH_TRUNC  hmac-sha1-96 = hmac(sha1), 96 bits
    comp   IPComp                      XFRMA_ALG_COMP        deflate

Lengths are in bits, as the kernel counts them in ``alg_key_len``/``alg_icv_len``/
``alg_trunc_len``.  For ``rfc4106(gcm(aes))`` the key handed to the kernel is the AES key
followed by a 32-bit salt (RFC 4106 section 8.1), so ``aes-gcm-128`` has
``key_bits == 160`` and ``salt_bits == 32``; likewise AES-GMAC (RFC 4543), ChaCha20-Poly1305
(RFC 7634) and AES-CTR's nonce (RFC 3686) carry 32 bits, AES-CCM 24 (RFC 4309 section 7.1).
AES-GMAC is an AEAD that authenticates only: the payload travels in the clear.

``modules`` names the kernel modules (as in the kernel tree, e.g. Debian's
``/usr/lib/uml/modules/<release>``) that provide the algorithm; some kernels build them
in.  :data:`PROTOCOL_MODULES` does the same for the IPsec protocols themselves.

This table is the one source of every fact about an algorithm: the profile grammar
(:mod:`ipsec.profiles`), the names scapy and Wireshark give it (:mod:`ipsec.wire`) and
the modules a guest kernel loads (:func:`kernel_modules`) are all derived from it.
"""
from __future__ import annotations

import dataclasses

KINDS: tuple[str, ...] = ("aead", "crypt", "auth", "comp")


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One IPsec algorithm as the testbed offers it.

    Attributes:
        name: user-facing name, e.g. ``"aes-gcm-256"``.
        kernel_name: the Linux crypto API name used in xfrm, e.g. ``"rfc4106(gcm(aes))"``.
        kind: ``"aead"``, ``"crypt"``, ``"auth"`` or ``"comp"``.
        key_bits: default length of the key material handed to the kernel (includes the
            salt for AEAD).
        key_bits_allowed: every key length the testbed accepts for this algorithm.
        icv_bits: integrity check value on the wire: the AEAD tag length or the HMAC
            truncation length; 0 for ciphers and compression.
        icv_bits_allowed: every ICV length accepted (AES-GCM allows 64, 96 and 128).
        block_bytes: cipher block size in bytes (1 for stream-like modes such as GCM; ESP
            pads to a multiple of ``max(block_bytes, 4)``); 0 when not a cipher.
        iv_bytes: explicit IV carried in every ESP packet; 0 when none.
        salt_bits: part of the key that is a nonce salt, not cipher key (AEAD only).
        modules: kernel modules that provide the algorithm.
        rfc: the document that defines its use in IPsec.
        profile_name: its word in profile names (``sha1`` in ``aes-cbc-128-sha1``; a cipher
            with several key sizes takes ``-<bits>``: ``aes-cbc-128``); "" when profiles
            name it by ``name`` (AES-GCM) or not at all.
        scapy_name: scapy's name for it (``scapy.layers.ipsec`` CRYPT_ALGOS / AUTH_ALGOS),
            "" when scapy has none.
        wireshark_name: the ESP dissector's name for it (``packet-ipsec.c``), with
            ``{icv_bytes}`` where it depends on the ICV length; "" when it has none.
        ike_name: strongSwan's proposal keyword for it, with ``{bits}`` (the cipher key
            without salt) and ``{icv_bytes}`` where they vary: ``aes{bits}gcm{icv_bytes}``.
    """

    name: str
    kernel_name: str
    kind: str
    key_bits: int
    key_bits_allowed: tuple[int, ...]
    icv_bits: int = 0
    icv_bits_allowed: tuple[int, ...] = (0,)
    block_bytes: int = 0
    iv_bytes: int = 0
    salt_bits: int = 0
    modules: tuple[str, ...] = ()
    rfc: str = ""
    profile_name: str = ""
    scapy_name: str = ""
    wireshark_name: str = ""
    ike_name: str = ""

    def __post_init__(self) -> None:
        # The catalog is data written by hand: check it as strictly as user input.
        if self.kind not in KINDS:
            raise ValueError(f"Algorithm.kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.key_bits not in self.key_bits_allowed:
            raise ValueError(f"Algorithm {self.name}: key_bits {self.key_bits} not in key_bits_allowed")
        if self.icv_bits not in self.icv_bits_allowed:
            raise ValueError(f"Algorithm {self.name}: icv_bits {self.icv_bits} not in icv_bits_allowed")
        if any(bits % 8 for bits in self.key_bits_allowed + self.icv_bits_allowed):
            raise ValueError(f"Algorithm {self.name}: key and ICV lengths must be whole bytes")

    @property
    def key_bytes(self) -> int:
        """Default key length in bytes."""
        return self.key_bits // 8

    @property
    def cipher_key_bits(self) -> int:
        """Default key length without the salt (the AES key size for AES-GCM)."""
        return self.key_bits - self.salt_bits

    @property
    def icv_bytes(self) -> int:
        """Default ICV length in bytes."""
        return self.icv_bits // 8


_GCM_MODULES = ("gcm", "ghash-generic", "ctr", "seqiv", "aes_generic")
_CCM_MODULES = ("ccm", "ctr", "seqiv", "aes_generic")
_CHACHA_MODULES = ("chacha20poly1305", "chacha_generic", "poly1305_generic", "libchacha", "libpoly1305", "seqiv")
_CTR_AES_MODULES = ("ctr", "aes_generic", "authenc", "seqiv")
_CBC_AES_MODULES = ("cbc", "aes_generic", "authenc", "echainiv")
_CBC_DES_MODULES = ("cbc", "des_generic", "authenc", "echainiv")


def _aes_gcm(aes_bits: int) -> Algorithm:
    return Algorithm(
        name=f"aes-gcm-{aes_bits}", kernel_name="rfc4106(gcm(aes))", kind="aead",
        key_bits=aes_bits + 32, key_bits_allowed=(aes_bits + 32,),
        icv_bits=128, icv_bits_allowed=(64, 96, 128),
        block_bytes=1, iv_bytes=8, salt_bits=32, modules=_GCM_MODULES, rfc="RFC 4106",
        # scapy splits the RFC 4106 key as AES key + 4-byte salt, as the kernel does
        scapy_name="AES-GCM", wireshark_name="AES-GCM with {icv_bytes} octet ICV [RFC4106]",
        ike_name="aes{bits}gcm{icv_bytes}")


def _aes_ccm(aes_bits: int) -> Algorithm:
    return Algorithm(
        name=f"aes-ccm-{aes_bits}", kernel_name="rfc4309(ccm(aes))", kind="aead",
        key_bits=aes_bits + 24, key_bits_allowed=(aes_bits + 24,),
        icv_bits=128, icv_bits_allowed=(64, 96, 128),
        block_bytes=1, iv_bytes=8, salt_bits=24, modules=_CCM_MODULES, rfc="RFC 4309",
        # Wireshark's ESP dissector has no AES-CCM
        scapy_name="AES-CCM", ike_name="aes{bits}ccm{icv_bytes}")


def _aes_gmac(aes_bits: int) -> Algorithm:
    return Algorithm(
        name=f"aes-gmac-{aes_bits}", kernel_name="rfc4543(gcm(aes))", kind="aead",
        key_bits=aes_bits + 32, key_bits_allowed=(aes_bits + 32,),
        icv_bits=128, icv_bits_allowed=(128,),
        block_bytes=1, iv_bytes=8, salt_bits=32, modules=_GCM_MODULES, rfc="RFC 4543",
        # integrity only; Wireshark's ESP dissector has no AES-GMAC
        scapy_name="AES-NULL-GMAC", ike_name="aes{bits}gmac")


def _aes_ctr() -> Algorithm:
    return Algorithm(
        name="aes-ctr", kernel_name="rfc3686(ctr(aes))", kind="crypt",
        key_bits=160, key_bits_allowed=(160, 224, 288),
        block_bytes=1, iv_bytes=8, salt_bits=32, modules=_CTR_AES_MODULES, rfc="RFC 3686",
        profile_name="aes-ctr", scapy_name="AES-CTR", wireshark_name="AES-CTR [RFC3686]",
        ike_name="aes{bits}ctr")


#: Every algorithm the testbed offers, in a stable order (AEAD, crypt, auth, comp).
ALGORITHMS: tuple[Algorithm, ...] = (
    _aes_gcm(128),
    _aes_gcm(192),
    _aes_gcm(256),
    _aes_ccm(128),
    _aes_ccm(256),
    _aes_gmac(128),
    _aes_gmac(256),
    Algorithm(name="chacha20-poly1305", kernel_name="rfc7539esp(chacha20,poly1305)", kind="aead",
              key_bits=288, key_bits_allowed=(288,), icv_bits=128, icv_bits_allowed=(128,),
              block_bytes=1, iv_bytes=8, salt_bits=32, modules=_CHACHA_MODULES, rfc="RFC 7634",
              scapy_name="CHACHA20-POLY1305", wireshark_name="ChaCha20 with Poly1305 [RFC7634]",
              ike_name="chacha20poly1305"),
    Algorithm(name="aes-cbc", kernel_name="cbc(aes)", kind="crypt",
              key_bits=128, key_bits_allowed=(128, 192, 256),
              block_bytes=16, iv_bytes=16, modules=_CBC_AES_MODULES, rfc="RFC 3602",
              profile_name="aes-cbc", scapy_name="AES-CBC", wireshark_name="AES-CBC [RFC3602]", ike_name="aes{bits}"),
    _aes_ctr(),
    Algorithm(name="3des-cbc", kernel_name="cbc(des3_ede)", kind="crypt",
              key_bits=192, key_bits_allowed=(192,),
              block_bytes=8, iv_bytes=8, modules=_CBC_DES_MODULES, rfc="RFC 2451",
              profile_name="3des-cbc", scapy_name="3DES", wireshark_name="TripleDES-CBC [RFC2451]", ike_name="3des"),
    Algorithm(name="des-cbc", kernel_name="cbc(des)", kind="crypt",
              key_bits=64, key_bits_allowed=(64,),
              block_bytes=8, iv_bytes=8, modules=_CBC_DES_MODULES, rfc="RFC 2405",
              profile_name="des-cbc", scapy_name="DES", wireshark_name="DES-CBC [RFC2405]", ike_name="des"),
    Algorithm(name="null", kernel_name="ecb(cipher_null)", kind="crypt",
              key_bits=0, key_bits_allowed=(0,),
              block_bytes=1, iv_bytes=0, modules=("crypto_null", "authenc"), rfc="RFC 2410",
              profile_name="null", scapy_name="NULL", wireshark_name="NULL", ike_name="null"),
    Algorithm(name="hmac-sha1-96", kernel_name="hmac(sha1)", kind="auth",
              key_bits=160, key_bits_allowed=(160,), icv_bits=96, icv_bits_allowed=(96,),
              modules=("hmac", "sha1_generic"), rfc="RFC 2404",
              profile_name="sha1", scapy_name="HMAC-SHA1-96", wireshark_name="HMAC-SHA-1-96 [RFC2404]",
              ike_name="sha1"),
    Algorithm(name="hmac-sha256-128", kernel_name="hmac(sha256)", kind="auth",
              key_bits=256, key_bits_allowed=(256,), icv_bits=128, icv_bits_allowed=(128,),
              modules=("hmac", "sha256_generic"), rfc="RFC 4868",
              profile_name="sha256", scapy_name="SHA2-256-128", wireshark_name="HMAC-SHA-256-128 [RFC4868]",
              ike_name="sha256"),
    Algorithm(name="hmac-sha384-192", kernel_name="hmac(sha384)", kind="auth",
              key_bits=384, key_bits_allowed=(384,), icv_bits=192, icv_bits_allowed=(192,),
              modules=("hmac", "sha512_generic"), rfc="RFC 4868",
              profile_name="sha384", scapy_name="SHA2-384-192", wireshark_name="HMAC-SHA-384-192 [RFC4868]",
              ike_name="sha384"),
    Algorithm(name="hmac-sha512-256", kernel_name="hmac(sha512)", kind="auth",
              key_bits=512, key_bits_allowed=(512,), icv_bits=256, icv_bits_allowed=(256,),
              modules=("hmac", "sha512_generic"), rfc="RFC 4868",
              profile_name="sha512", scapy_name="SHA2-512-256", wireshark_name="HMAC-SHA-512-256 [RFC4868]",
              ike_name="sha512"),
    Algorithm(name="hmac-md5-96", kernel_name="hmac(md5)", kind="auth",
              key_bits=128, key_bits_allowed=(128,), icv_bits=96, icv_bits_allowed=(96,),
              modules=("hmac", "md5"), rfc="RFC 2403",
              profile_name="md5", scapy_name="HMAC-MD5-96", wireshark_name="HMAC-MD5-96 [RFC2403]", ike_name="md5"),
    Algorithm(name="deflate", kernel_name="deflate", kind="comp",
              key_bits=0, key_bits_allowed=(0,), modules=("deflate",), rfc="RFC 2394"),
)

_BY_NAME: dict[str, Algorithm] = {alg.name: alg for alg in ALGORITHMS}

#: Kernel modules providing each IPsec protocol, by protocol and IP version (4 or 6).
#: IPComp in tunnel mode also needs the IP-in-IP xfrm type (``xfrm4_tunnel``/``xfrm6_tunnel``).
PROTOCOL_MODULES: dict[str, dict[int, tuple[str, ...]]] = {
    "esp": {4: ("esp4",), 6: ("esp6",)},
    "ah": {4: ("ah4",), 6: ("ah6",)},
    "comp": {4: ("ipcomp", "xfrm_ipcomp", "xfrm4_tunnel"),
             6: ("ipcomp6", "xfrm_ipcomp", "xfrm6_tunnel")},
}


#: Modules every IPsec SA needs: the xfrm netlink interface and its algorithm table.
XFRM_MODULES: tuple[str, ...] = ("xfrm_user", "xfrm_algo")
#: The kernel's random number generators, which seqiv and echainiv draw IVs from (drbg's
#: default instance is HMAC-SHA512).
RNG_MODULES: tuple[str, ...] = ("drbg", "jitterentropy_rng", "ansi_cprng", "sha512_generic")
#: Extended sequence numbers (authencesn), which an SA may ask for.
ESN_MODULES: tuple[str, ...] = ("authencesn",)


def kernel_modules() -> tuple[str, ...]:
    """Every module the testbed's IPsec may need, derived from this table (for a guest's boot)."""
    mods: list[str] = list(XFRM_MODULES)
    for protocol in PROTOCOL_MODULES.values():
        for family in (4, 6):
            mods += protocol[family]
    for alg in ALGORITHMS:
        mods += alg.modules
    mods += RNG_MODULES + ESN_MODULES
    return tuple(dict.fromkeys(mods))


def algorithm_names(kind: str | None = None) -> tuple[str, ...]:
    """User-facing names of all algorithms, or of one kind."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"algorithm kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return tuple(alg.name for alg in ALGORITHMS if kind is None or alg.kind == kind)


def get_algorithm(name: str, kind: str | None = None) -> Algorithm:
    """The catalog entry called ``name``; with ``kind``, it must also be of that kind.

    Raises:
        ValueError: unknown name or wrong kind; the message lists the valid names.
    """
    alg = _BY_NAME.get(name)
    if alg is None or (kind is not None and alg.kind != kind):
        what = f"{kind} algorithm" if kind else "algorithm"
        raise ValueError(f"unknown {what} {name!r}; valid names: {', '.join(algorithm_names(kind))}")
    return alg


def find_by_kernel_name(kernel_name: str, kind: str, key_bits: int | None = None,
                        icv_bits: int | None = None) -> Algorithm | None:
    """The catalog entry for an algorithm as the kernel reports it, or None.

    ``rfc4106(gcm(aes))`` is three entries told apart by ``key_bits``; an HMAC is only
    matched when ``icv_bits`` (its truncation) matches too, when given.
    """
    for alg in ALGORITHMS:
        if alg.kernel_name != kernel_name or alg.kind != kind:
            continue
        if key_bits is not None and key_bits not in alg.key_bits_allowed:
            continue
        if icv_bits is not None and icv_bits not in alg.icv_bits_allowed:
            continue
        return alg
    return None
