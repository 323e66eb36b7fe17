"""Bad input gives a clear error naming the problem, and leaves no state in the kernel."""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from conftest import ip

from ipsec.plan import AssociationSpec, Endpoint, SpiPlanner, apply_association, plan_association
from ipsec.sa import SASpec
from ipsec.xfrm import XfrmError


def assert_empty(*namespaces):
    for ns in namespaces:
        assert ip("-n", ns, "xfrm", "state").strip() == "", f"SAs left in {ns}"
        assert ip("-n", ns, "xfrm", "policy").strip() == "", f"policies left in {ns}"


def spec_for(pair, profile="aes-gcm-256", mode="transport", family=4):
    return AssociationSpec(profile, mode, Endpoint(pair.a, pair.addr("a", family)),
                           Endpoint(pair.b, pair.addr("b", family)))


@pytest.mark.parametrize("kwargs,match", [
    (dict(aead="aes-gcm-256", aead_key=b"\0" * 32), r"aead_key.*36"),               # salt missing
    (dict(crypt="aes-cbc", crypt_key=b"\0" * 15, auth="hmac-sha1-96", auth_key=b"\0" * 20), "crypt_key"),
    (dict(crypt="blowfish", crypt_key=b"\0" * 16), "unknown crypt algorithm 'blowfish'.*aes-cbc"),
    (dict(aead="aes-gcm-128", aead_key=b"\0" * 20, aead_icv_bits=80), "aead_icv_bits.*64, 96, 128"),
])
def test_bad_sa_specs_fail_before_the_kernel(pair, kwargs, match):
    with pytest.raises(ValueError, match=match):
        SASpec(src=pair.v4a, dst=pair.v4b, proto="esp", spi=0x2000, **kwargs)
    assert_empty(pair.a, pair.b)


def test_unknown_profile_and_icv_are_named(pair):
    with pytest.raises(ValueError, match="unknown profile part 'aes-gcm-512'"):
        spec_for(pair, "aes-gcm-512")
    with pytest.raises(ValueError, match="icv8, icv12, icv16"):
        spec_for(pair, "aes-gcm-128-icv10")


def test_ipv6_selectors_with_ipv4_endpoints(pair):
    with pytest.raises(ValueError, match="IPv6 selectors .* with IPv4 endpoints"):
        AssociationSpec("aes-gcm-256", "tunnel", Endpoint(pair.a, pair.v4a, "2001:db8:1::/64"),
                        Endpoint(pair.b, pair.v4b, "2001:db8:2::/64"))
    assert_empty(pair.a, pair.b)


def test_spi_collision_in_a_plan_is_refused():
    planner = SpiPlanner()
    planner.reserve("esp", 0x3000)
    with pytest.raises(ValueError, match="SPI collision: esp SPI 0x3000"):
        planner.reserve("esp", 0x3000)


def test_spi_collision_in_the_kernel_rolls_back_both_sides(pair):
    first = plan_association(spec_for(pair), SpiPlanner(first_spi=0x4000, first_reqid=1))
    apply_association(first)
    before_a = ip("-n", pair.a, "xfrm", "state")
    # A second association whose SPIs collide with the first in namespace b only.
    other = AssociationSpec("aes-cbc-128-sha1", "transport", Endpoint(pair.a, pair.v6a), Endpoint(pair.b, pair.v6b))
    clash = plan_association(other, SpiPlanner(first_spi=0x5000, first_reqid=2))
    sas = list(clash.sas)
    sas[1] = dataclasses.replace(first.sas[0])  # an SA b already holds: EEXIST on side b
    clash = dataclasses.replace(clash, sas=tuple(sas))
    with pytest.raises(XfrmError, match=r"add_sa esp spi 0x00004000.*EEXIST|File exists") as e:
        apply_association(clash)
    assert e.value.errno == 17
    # side a installed its part before b failed, and took it back
    assert ip("-n", pair.a, "xfrm", "state") == before_a
    assert "0x00005000" not in ip("-n", pair.b, "xfrm", "state")


def test_missing_kernel_algorithm_is_named_with_its_module(pair):
    """Make DES unavailable (unload it, stop on-demand loading), then ask for it."""
    if subprocess.run(["grep", "-q", "^des_generic ", "/proc/modules"]).returncode != 0:
        subprocess.run(["modprobe", "-d", "/run/itb-modules", "des_generic"], capture_output=True)
    if subprocess.run(["grep", "-q", "^des_generic ", "/proc/modules"]).returncode != 0 \
            and "des-generic" in Path("/proc/crypto").read_text():
        # the project's UML kernel (scripts/build-uml-kernel.sh) has its algorithms built in
        pytest.skip("des_generic is built into this kernel: no way to make an algorithm missing")
    with open("/proc/sys/kernel/modprobe") as f:
        helper = f.read().strip()
    try:
        with open("/proc/sys/kernel/modprobe", "w") as f:
            f.write("/bin/false\n")
        unloaded = subprocess.run(["rmmod", "des_generic"], capture_output=True, text=True)
        if unloaded.returncode != 0 and "builtin" in unloaded.stderr + Path("/proc/modules").read_text():
            pytest.skip("des_generic is built into this kernel: no way to make an algorithm missing")
        assert unloaded.returncode == 0, unloaded.stderr
        with pytest.raises(XfrmError) as e:
            apply_association(plan_association(spec_for(pair, "des-cbc-sha1")))
        msg = str(e.value)
        assert "des-cbc" in msg and "des_generic" in msg, msg
        assert "des_generic" in e.value.missing_modules
        assert_empty(pair.a, pair.b)
    finally:
        with open("/proc/sys/kernel/modprobe", "w") as f:
            f.write(helper + "\n")
        # Load it back: the guest loads its modules at boot and nothing on demand afterwards,
        # so the tests after this one would find DES missing too.
        subprocess.run(["modprobe", "-d", "/run/itb-modules", "des_generic"], capture_output=True)
        assert subprocess.run(["grep", "-q", "^des_generic ", "/proc/modules"]).returncode == 0, \
            "des_generic could not be loaded back"
