"""Kernels as named inputs (testbed.kernelsource) and what the recipe makes of them (testbed.kernelbuild's plan
and key), without building anything."""
from __future__ import annotations

import gzip
import os
import subprocess

import pytest

from testbed import kernelbuild, kernelsource
from testbed.kernelsource import KernelNameError, parse

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}


def kernel_tree(path, sublevel=7):
    """A tree with what makes it a kernel tree for the names (a Makefile, arch/um), in git; its commits."""
    (path / "arch" / "um").mkdir(parents=True)
    (path / "Makefile").write_text(f"VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = {sublevel}\n")
    run = lambda *a: subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True, text=True,  # noqa: E731
                                    env=GIT_ENV).stdout.strip()
    run("init", "-q")
    run("add", "-A")
    run("commit", "-q", "-m", "first")
    first = run("rev-parse", "HEAD")
    (path / "Makefile").write_text(f"VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = {sublevel + 1}\n")
    run("commit", "-q", "-a", "-m", "second")
    run("tag", "v-second")
    return first, run("rev-parse", "HEAD")


def test_every_form_of_name_is_read(tmp_path):
    patch = tmp_path / "extra.patch"
    patch.write_text("--- a/x\n+++ b/x\n")
    frag = tmp_path / "more.config"
    frag.write_text("# a comment\nCONFIG_WIREGUARD=y\n# CONFIG_INET_ESP_OFFLOAD is not set\n")
    tarball = tmp_path / "linux-6.8.1.tar.xz"
    tarball.write_bytes(b"x")
    image = tmp_path / "linux"
    image.write_text("#!/bin/sh\n")
    image.chmod(0o755)
    first, _second = kernel_tree(tmp_path / "tree")

    assert parse("debian").kind == "debian" and not parse("debian").built
    recipe = parse("recipe")
    assert (recipe.kind, recipe.base, recipe.package, recipe.canonical) == ("package", "6.1", "linux-source-6.1",
                                                                            "recipe")
    assert parse("6.12").package == "linux-source-6.12" and parse("6.12").built
    named = parse(f"6.12+patch:{patch}+config:{frag}")
    assert named.patches == (str(patch),) and named.configs == (str(frag),)
    assert parse(str(tarball)).kind == "tarball" and parse(str(tarball)).slug() == "linux-6.8.1"
    assert parse(str(image)).kind == "image" and not parse(str(image)).built
    tree = parse(f"{tmp_path / 'tree'}@v-second+config:{frag}")
    assert (tree.kind, tree.ref, tree.base) == ("git", "v-second", str(tmp_path / "tree"))
    assert parse(str(tmp_path / "tree")).ref == "HEAD"
    # relative paths are taken from the directory given, and made absolute for another process
    rel = parse("tree@v-second+patch:extra.patch", cwd=str(tmp_path))
    assert rel.canonical == f"{tmp_path / 'tree'}@v-second+patch:{patch}"
    assert parse(rel.canonical) == parse(rel.canonical, cwd="/")
    stepped = tree.with_ref(first)
    assert stepped.ref == first and stepped.configs == (str(frag),) and parse(stepped.canonical).ref == first


@pytest.mark.parametrize("text,words", [
    ("", "an empty kernel name"),
    ("nosuch", "does not exist"),
    ("debian+config:{frag}", "Debian's linux.uml is a built kernel"),
    ("6.12+patch:{tmp}/missing.patch", "patch file"),
    ("6.12+oops:x", r"is not \+patch:FILE or \+config:FRAGMENT"),
    ("6.12+config:{bad}", "is not a configuration line"),
    ("{plain}", "is not a Linux kernel tree"),
    ("{tree}@no-such-ref", "'no-such-ref' is not a tag, branch or commit"),
    ("{image}@v1", "@REF goes with a git work tree"),
    ("{image}+patch:{patch}", "is a built kernel image; a patch"),
    ("{notes}", "neither an executable UML kernel image, an x86 bzImage"),
])
def test_a_bad_name_is_one_line_naming_it(tmp_path, text, words):
    frag = tmp_path / "ok.config"
    frag.write_text("CONFIG_X=y\n")
    bad = tmp_path / "bad.config"
    bad.write_text("CONFIG_X=y\nmake it fast\n")
    patch = tmp_path / "p.patch"
    patch.write_text("")
    (tmp_path / "plain").mkdir()
    kernel_tree(tmp_path / "tree")
    image = tmp_path / "linux"
    image.write_text("#!/bin/sh\n")
    image.chmod(0o755)
    (tmp_path / "notes.txt").write_text("")
    text = text.format(frag=frag, bad=bad, tmp=tmp_path, plain=tmp_path / "plain", tree=tmp_path / "tree",
                       image=image, patch=patch, notes=tmp_path / "notes.txt")
    with pytest.raises(KernelNameError, match=words) as e:
        parse(text, cwd=str(tmp_path))
    assert "\n" not in str(e.value)


@pytest.fixture
def recipe_files(tmp_path, monkeypatch):
    """The recipe's files and Debian's configuration as stand-ins, and an empty cache."""
    d = tmp_path / "recipe"
    d.mkdir()
    (d / kernelbuild.FP_PATCH).write_text("--- a/arch/x86/um/user-offsets.c\n")
    (d / "testbed.config").write_text("CONFIG_INET_ESP=y\n# CONFIG_INET_ESP_OFFLOAD is not set\n")
    (d / "tiny.config").write_text("CONFIG_BINFMT_ELF=y\n")
    (d / "x86.config").write_text("CONFIG_9P_FS=y\n")
    debian = tmp_path / "config.gz"
    with gzip.open(debian, "wt") as f:
        f.write("CONFIG_INET_ESP=m\nCONFIG_INET_ESP_OFFLOAD=m\nCONFIG_HZ_100=y\n")
    monkeypatch.setattr(kernelbuild, "RECIPE_DIR", str(d))
    monkeypatch.setattr(kernelbuild, "DEBIAN_CONFIG", str(debian))
    monkeypatch.setenv("IPSEC_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernelbuild, "package_version",
                        lambda pkg, installed_only=False: {"linux-source-6.1": "6.1.192-2",
                                                           "linux-source-6.12": "6.12.117-1~deb12u1"}.get(pkg))
    return d


def test_the_key_follows_everything_that_decides_the_kernel(tmp_path, recipe_files, monkeypatch):
    base = kernelbuild.plan(parse("recipe"), fp_bytes=12288)
    assert base.version == "6.1.192" and base.source_id == "6.1.192-2" and base.stack_order == 3
    assert base.key == kernelbuild.plan(parse("6.1"), fp_bytes=12288).key  # recipe is 6.1
    assert os.path.basename(base.directory) == f"6.1-6.1.192-um-{base.key}"
    frag = tmp_path / "wg.config"
    frag.write_text("CONFIG_WIREGUARD=y\n")
    keys = {base.key, kernelbuild.plan(parse("6.12"), fp_bytes=12288).key,
            kernelbuild.plan(parse(f"6.1+config:{frag}"), fp_bytes=12288).key,
            kernelbuild.plan(parse("recipe"), fp_bytes=16384).key,
            kernelbuild.plan(parse("recipe"), variant="tiny", fp_bytes=12288).key}
    assert len(keys) == 5
    frag.write_text("CONFIG_WIREGUARD=n\n")  # the fragment's content, not its name
    assert kernelbuild.plan(parse(f"6.1+config:{frag}"), fp_bytes=12288).key not in keys
    (recipe_files / "testbed.config").write_text("CONFIG_INET_ESP=y\n")  # the recipe changed
    assert kernelbuild.plan(parse("recipe"), fp_bytes=12288).key != base.key
    # a commit of a tree is its identity
    first, second = kernel_tree(tmp_path / "tree")
    a = kernelbuild.plan(parse(f"{tmp_path / 'tree'}@{first}"), fp_bytes=12288)
    b = kernelbuild.plan(parse(f"{tmp_path / 'tree'}@v-second"), fp_bytes=12288)
    assert (a.version, b.version, a.source_id, b.source_id) == ("6.12.7", "6.12.8", first, second)
    assert a.key != b.key


def test_a_version_without_a_package_and_a_buffer_too_small_are_refused(recipe_files):
    with pytest.raises(KernelNameError, match="no linux-source-6.99"):
        kernelbuild.plan(parse("6.99"))
    with pytest.raises(kernelbuild.BuildError, match="at least 832"):
        kernelbuild.plan(parse("recipe"), fp_bytes=512)
    with pytest.raises(kernelbuild.BuildError, match="not built by the recipe"):
        kernelbuild.plan(parse("debian"))


def test_the_counted_backends_build_is_the_same_source_for_x86_with_a_key_and_place_of_its_own(tmp_path,
                                                                                              recipe_files):
    uml = kernelbuild.plan(parse("recipe"), fp_bytes=12288)
    x86 = kernelbuild.plan(parse("recipe"), kernelbuild.X86)
    assert (x86.source_id, x86.version, x86.patches) == (uml.source_id, uml.version, uml.patches)  # one tree
    assert (x86.arch, x86.image, x86.fp_bytes, x86.stack_order) == ("x86_64", "bzImage", 0, 0)
    assert (uml.arch, uml.image) == ("um", "linux")
    # the network and IPsec UML has, then what QEMU's x86-64 guest needs; no Debian UML configuration under it
    assert [os.path.basename(f) for f, _ in x86.fragments] == ["testbed.config", "x86.config"]
    assert x86.debian_config == "" and x86.key != uml.key
    assert os.path.basename(x86.directory) == f"6.1-6.1.192-x86-{x86.key}"
    assert x86.key == kernelbuild.plan(parse("recipe"), kernelbuild.X86, fp_bytes=16384).key  # UML's buffer: no part
    with pytest.raises(kernelbuild.BuildError, match="no recipe variant"):
        kernelbuild.plan(parse("recipe"), "arm64")
    # cached as a bzImage (no executable) beside its configuration, and found for the counted backend by its name
    d = tmp_path / "cache" / "kernels" / os.path.basename(x86.directory)
    d.mkdir(parents=True)
    (d / "bzImage").write_bytes(bytes(0x202) + b"HdrS" + bytes(100))
    (d / "config").write_text("CONFIG_WIREGUARD=y\n")
    (d / "build.json").write_text(f'{{"origin": "recipe", "key": "{x86.key}", "variant": "x86", "version": '
                                  f'"6.1.192", "built": "2026-11-28T18:00:00Z"}}')
    found = kernelbuild.cached(x86)
    assert found.path == str(d / "bzImage") and found.counted
    from testbed import qemukernel

    chosen = qemukernel.select("recipe")
    assert (chosen.path, chosen.origin, chosen.version) == (found.path, "recipe", "6.1.192")
    assert chosen.configured("CONFIG_WIREGUARD") is True and "project's x86-64 kernel" in chosen.describe()
    with pytest.raises(qemukernel.KernelUnavailableError, match="kernel build --x86 6.12"):
        qemukernel.select("6.12")


def test_the_stack_holds_the_buffer_and_debians_16_kib():
    assert kernelbuild.stack_order_for(2696) == 3  # 2,696 bytes + 16 KiB of stack need more than 16 KiB
    assert kernelbuild.stack_order_for(832) == 3
    assert kernelbuild.stack_order_for(12288) == 3
    assert kernelbuild.stack_order_for(20000) == 4


def test_the_cache_finds_a_build_by_its_key_and_lists_it(tmp_path, recipe_files):
    p = kernelbuild.plan(parse("recipe"), fp_bytes=12288)
    assert kernelbuild.cached(p) is None and kernelbuild.builds() == []
    d = tmp_path / "cache" / "kernels" / "anything"
    d.mkdir(parents=True)
    (d / "linux").write_text("")
    (d / "linux").chmod(0o755)
    (d / "build.json").write_text(f'{{"origin": "recipe", "key": "{p.key}", "built": "2026-11-26T18:00:00Z"}}')
    found = kernelbuild.cached(p)
    assert found.path == str(d / "linux") and [b.path for b in kernelbuild.builds()] == [found.path]
    kernelbuild.touch_used(found.path)
    assert kernelbuild.last_used(found).startswith("20")


def test_configuration_differences_are_read_from_both_kinds_of_file(tmp_path, recipe_files):
    config = tmp_path / "config"
    config.write_text("CONFIG_INET_ESP=y\n# CONFIG_INET_ESP_OFFLOAD is not set\nCONFIG_HZ_100=y\nCONFIG_NEW=y\n")
    assert kernelbuild.config_differences(str(config)) == [
        ("CONFIG_INET_ESP", "m", "y"), ("CONFIG_INET_ESP_OFFLOAD", "m", "n"), ("CONFIG_NEW", "-", "y")]


def test_the_fragment_lines_are_what_the_recipe_checks(tmp_path):
    frag = tmp_path / "x.config"
    frag.write_text("# why\nCONFIG_A=y\n\n# CONFIG_B is not set\nCONFIG_C=\"x\"\n")
    assert kernelbuild.fragment_lines(str(frag)) == ["CONFIG_A=y", "# CONFIG_B is not set", 'CONFIG_C="x"']
    assert kernelsource.RECIPE_VERSION == "6.1"


def test_a_version_gets_the_recipes_overlay_of_its_series_and_gone_options_go(tmp_path, recipe_files):
    (recipe_files / "testbed+6.12.config").write_text("#gone CONFIG_OLD: renamed CONFIG_NEW in 6.12\nCONFIG_NEW=y\n")
    (recipe_files / "testbed+6.20.config").write_text("CONFIG_LATER=y\n")
    assert kernelbuild.version_overlay("6.1.192") is None  # testbed.config is written for 6.1
    assert kernelbuild.version_overlay("6.12.117").endswith("testbed+6.12.config")
    assert kernelbuild.version_overlay("6.15.2").endswith("testbed+6.12.config")
    assert kernelbuild.version_overlay("7.0").endswith("testbed+6.20.config")
    base = tmp_path / "base.config"
    base.write_text("CONFIG_OLD=y\nCONFIG_A=y\n# CONFIG_B is not set\n")
    mine = tmp_path / "mine.config"
    mine.write_text("CONFIG_A=n\n")
    assert kernelbuild.merged_lines([str(base), str(recipe_files / "testbed+6.12.config"), str(mine)]) == [
        "# CONFIG_B is not set", "CONFIG_NEW=y", "CONFIG_A=n"]
    # the overlay is part of what the key hashes, for the versions it applies to
    older = kernelbuild.plan(parse("6.1"), fp_bytes=12288)
    newer = kernelbuild.plan(parse("6.12"), fp_bytes=12288)
    assert [os.path.basename(f) for f, _ in older.fragments] == ["testbed.config"]
    assert [os.path.basename(f) for f, _ in newer.fragments] == ["testbed.config", "testbed+6.12.config"]
