#!/usr/bin/env bash
# Build a User-Mode Linux kernel from Debian's linux-source-6.1, for `regress --ab`.
#
#   scripts/build-uml-kernel.sh             build (or find in the cache) and print the kernel's path
#   scripts/build-uml-kernel.sh --check     print the cached kernel's path; exit 1 if none is built
#
# The configuration is Debian's own UML kernel's (/usr/share/doc/user-mode-linux/config.gz),
# so an A/B against Debian's linux.uml compares two point releases of 6.1 built alike, with
# two differences, both for the build's sake: the modules the testbed loads (IPsec, crypto,
# IPv6, tc, veth) are built in rather than modules, every other module is left out, and no
# debug information is generated.  The result boots with `--uml-kernel PATH` and needs no
# module directory.
#
# Cached under ${IPSEC_TESTBED_CACHE:-~/.cache/ipsec-testbed}/kernels/linux-<version>-um-<key>/,
# where <key> is a hash of the recipe (what is built in and left out) and of Debian's
# configuration: a second run returns at once.  The source tree is removed after the build
# (the kernel image and its .config are kept), about 150 MB less on disk.
#
# Needs root only to install missing packages (linux-source-6.1, bc, flex, bison, gcc, make).
set -euo pipefail

say() { printf 'build-uml-kernel: %s\n' "$*" >&2; }

cache=${IPSEC_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipsec-testbed}/kernels
debian_config=/usr/share/doc/user-mode-linux/config.gz
source_package=linux-source-6.1
jobs=${JOBS:-$(nproc)}

# Options built in, by name prefix: what the testbed's guests load as modules from Debian's kernel.
builtin='CRYPTO_|XFRM|INET_|INET6_|IPV6|NET_KEY|NET_IPIP|NET_IPGRE|NET_SCH_|NET_CLS_|NET_ACT_|NET_EMATCH|VETH|DUMMY|IFB|TUN$'

# Options switched off: debug information (time and disk), module signing (no modules), the
# UML network drivers that need libraries Debian's build has (VDE, pcap; the testbed uses none),
# and the fixed-time AES: built in, it outranks aes-generic (priority 101 against 100) and every
# AES profile would use it, while Debian's guests load aes_generic alone. Measured with it: the
# detect suite's AES-GCM-256 goodput at 0.65 of Debian's kernel, an A/B of the AES code, not of 6.1.
disabled='DEBUG_INFO MODULE_SIG UML_NET_VDE UML_NET_PCAP CRYPTO_AES_TI'
# The cache key: what decides the kernel built (the recipe above and Debian's configuration),
# not the rest of this script, so editing a message does not rebuild.
recipe=3
key=$( { echo "$recipe $builtin $disabled"; zcat "$debian_config" 2>/dev/null; } | sha256sum | cut -c1-12)
check_only=false
[[ ${1:-} == --check ]] && check_only=true

version=$(dpkg-query -W -f='${Version}' "$source_package" 2>/dev/null || true)
if [[ -z $version ]] || ! dpkg-query -W -f='${db:Status-Status}' "$source_package" 2>/dev/null | grep -qx installed; then
    version=""
fi

find_cached() {
    local d
    for d in "$cache"/linux-*-um-"$key"; do
        [[ -x $d/linux ]] && { echo "$d/linux"; return 0; }
    done
    return 1
}

if found=$(find_cached); then
    say "cached: $found ($(cat "$(dirname "$found")/build.txt" 2>/dev/null | head -1))"
    echo "$found"
    exit 0
fi
$check_only && { say "no kernel built yet (key $key) under $cache"; exit 1; }

[[ -r $debian_config ]] || { say "$debian_config missing: install user-mode-linux first (scripts/install.sh)"; exit 1; }

need=()
for p in "$source_package" bc flex bison gcc make xz-utils; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || need+=("$p")
done
if ((${#need[@]})); then
    [[ $(id -u) == 0 ]] || { say "needs root to install: ${need[*]} (run with sudo)"; exit 1; }
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
version=$(dpkg-query -W -f='${Version}' "$source_package")
upstream=${version%%-*}

out=$cache/linux-$upstream-um-$key
tree=$out/src
rm -rf "$out"
mkdir -p "$tree"
trap 'rm -rf "$tree"' EXIT
start=$(date +%s)

say "unpacking $source_package $version into $tree"
tar -xf /usr/src/linux-source-6.1.tar.xz -C "$tree" --strip-components=1

say "configuring: Debian's UML configuration, the testbed's modules built in, no other modules, no debug info"
zcat "$debian_config" | sed -E \
    -e "s/^CONFIG_(($builtin)[A-Z0-9_]*)=m$/CONFIG_\1=y/" \
    -e 's/^(CONFIG_[A-Z0-9_]+)=m$/# \1 is not set/' > "$tree/.config"
cd "$tree"
for opt in $disabled; do ./scripts/config --disable "$opt"; done
./scripts/config --enable DEBUG_INFO_NONE \
    --set-str SYSTEM_TRUSTED_KEYS "" --set-str SYSTEM_REVOCATION_KEYS "" --set-str LOCALVERSION "-itb"
make -s ARCH=um olddefconfig
for opt in INET_ESP INET6_ESP XFRM_USER CRYPTO_GCM NET_SCH_TBF NET_SCH_HTB NET_CLS_BPF NET_SCH_INGRESS VETH; do
    grep -qx "CONFIG_$opt=y" .config || { say "configuration lost CONFIG_$opt; not building"; exit 1; }
done

say "building with $jobs jobs (11 minutes on this project's 2-CPU machines; logged to $out/build.log)"
if ! make ARCH=um -j"$jobs" linux >"$out/build.log" 2>&1; then
    tail -30 "$out/build.log" >&2
    say "build failed; the log is $out/build.log"
    exit 1
fi
strip -o "$out/linux" linux
cp .config "$out/config"
elapsed=$(( $(date +%s) - start ))
printf 'linux %s (%s) for UML, built in %d s on %d CPUs, %s\n' "$upstream" "$version" "$elapsed" "$jobs" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$out/build.txt"
say "built $out/linux in $elapsed s"
echo "$out/linux"
