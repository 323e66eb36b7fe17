import pytest

from testbed import names


def test_names_carry_the_prefix_and_fit_ifnamsiz():
    rid = names.new_run_id()
    assert len(rid) == 6 and int(rid, 16) >= 0
    assert names.netns_name(rid, "h1") == f"itb-{rid}-h1"
    assert names.is_ours(names.netns_name(rid, "gw-a"))
    assert names.is_ours(names.ifname(rid, "v0"))
    assert names.is_ours(names.umid(rid))
    assert len(names.ifname(rid, "abcdef")) == 15


@pytest.mark.parametrize("name", ["eth0", "lo", "veth1234", "itbx", "it-123456-h1", "docker0"])
def test_foreign_names_are_not_ours(name):
    assert not names.is_ours(name)


def test_invalid_names_raise():
    with pytest.raises(ValueError, match="longer than 15"):
        names.ifname("abcdef", "toolong")
    with pytest.raises(ValueError, match="run id"):
        names.netns_name("XYZ", "h1")
    with pytest.raises(ValueError, match="role"):
        names.netns_name("abcdef", "Bad Role")
