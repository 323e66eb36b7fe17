#!/usr/bin/env bash
# Build IPsec Testbed's User-Mode Linux kernel from Debian's linux-source-6.1.
#
#   scripts/build-uml-kernel.sh                 build (or find in the cache) and print the kernel's path
#   scripts/build-uml-kernel.sh --check         print the cached kernel's path; exit 1 if none is built
#   scripts/build-uml-kernel.sh --key           print the recipe's cache key and exit
#   scripts/build-uml-kernel.sh --fp-bytes N    the XSAVE buffer the kernel hands the host (see below)
#   scripts/build-uml-kernel.sh --tiny          a tiny kernel for the tests (scripts/uml-kernel/tiny.config)
#   scripts/build-uml-kernel.sh --extra-config FILE
#                                               the same kernel with FILE's lines on top of the recipe's (a
#                                               kernel to compare with it: `regress --ab recipe PATH`; e.g.
#                                               scripts/uml-kernel/slower-aes.config, a known slower ESP)
#
# Why: Debian's linux.uml hands the host a fixed 2,696-byte buffer for its processes' FPU state,
# and a host whose CPU has a larger XSAVE area (AMX: 11,008 bytes) refuses it, so that kernel
# cannot boot there.  This kernel's buffer is 12,288 bytes (or the host's area rounded up to
# 4 KiB, if larger), with the kernel stack enlarged to hold it:
# scripts/uml-kernel/0001-x86-um-xsave-buffer-for-every-host.patch says why in the source.
#
# The data path is Debian's: its configuration, with the modules a Debian guest loads built in
# and nothing else (scripts/uml-kernel/testbed.config lists every change and its reason).
# docs/kernel.md has the measurements that compare the two kernels.
#
# --fp-bytes with a size below the host's XSAVE area builds a kernel that fails to boot here
# exactly as Debian's fails on an AMX host: the tests use it, with --tiny (no network, a fraction
# of the build time), to check the detection and the message on any x86-64 machine.
#
# Cached under ${IPSEC_TESTBED_CACHE:-~/.cache/ipsec-testbed}/kernels/linux-<version>-um-<key>/
# (linux, config, build.json, build.log), where <key> hashes what decides the kernel: the patch,
# the configuration fragment, the FP buffer, Debian's configuration and the source's version.
# A second run returns at once.  The source tree is removed after the build.
#
# Needs root only to install missing packages (linux-source-6.1, bc, flex, bison, gcc, libc6-dev, make, patch).
set -euo pipefail

# The whole script is one function, read by bash before it runs: editing the file during a
# build (minutes) cannot change what the running build does.
main() {

    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    repo=$(dirname "$here")
    say() { printf 'build-uml-kernel: %s\n' "$*" >&2; }
    die() { say "$*"; exit 1; }

    cache=${IPSEC_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipsec-testbed}/kernels
    debian_config=/usr/share/doc/user-mode-linux/config.gz
    source_package=linux-source-6.1
    patch=$here/uml-kernel/0001-x86-um-xsave-buffer-for-every-host.patch
    fragment=$here/uml-kernel/testbed.config
    variant=testbed
    jobs=${JOBS:-$(nproc)}
    python=${PYTHON:-python3}

    mode=build
    fp_bytes=""
    extra=""
    while (($#)); do
        case $1 in
            --check) mode=check ;;
            --tiny) variant=tiny; fragment=$here/uml-kernel/tiny.config ;;
            --key) mode=key ;;
            --fp-bytes) fp_bytes=${2:?--fp-bytes needs a size in bytes}; shift ;;
            --fp-bytes=*) fp_bytes=${1#*=} ;;
            --extra-config) extra=${2:?--extra-config needs a file}; shift ;;
            --extra-config=*) extra=${1#*=} ;;
            -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
            *) die "unknown argument '$1' (see --help)" ;;
        esac
        shift
    done

    if [[ -n $extra ]]; then
        [[ -r $extra ]] || die "--extra-config $extra: no such file"
        [[ $variant == tiny ]] && die "--extra-config goes with the full kernel, not --tiny"
        extra=$(cd "$(dirname "$extra")" && pwd)/$(basename "$extra")
        variant=testbed+$(basename "$extra" .config)
        # the recipe's fragment, then the extra one: for each option its last line counts
        merged=$(mktemp)
        trap 'rm -f "$merged"' EXIT
        grep -hE '^(CONFIG_|# CONFIG_)' "$fragment" "$extra" |
            awk '{ n = ($1 == "#") ? $2 : substr($1, 1, index($1, "=") - 1); last[n] = $0; order[n] = NR }
                 END { for (n in last) print order[n] "\t" last[n] }' | sort -n | cut -f2- > "$merged"
        fragment=$merged
    fi
    if [[ -z $fp_bytes ]]; then
        # 12,288 bytes holds every XSAVE area known (AMX's is 11,008); a larger host gets its own size.
        host=$(cd "$repo" && "$python" -m testbed.xsave 2>/dev/null || true)
        fp_bytes=12288
        if [[ $host =~ ^[0-9]+$ ]] && ((host > fp_bytes)); then
            fp_bytes=$(( (host + 4095) / 4096 * 4096 ))
        fi
    fi
    [[ $fp_bytes =~ ^[0-9]+$ ]] && ((fp_bytes >= 832 && fp_bytes % 8 == 0)) ||
        die "--fp-bytes $fp_bytes: a multiple of 8, at least 832 (the x86-64 signal frame's FP state)"
    # The buffer lives in every thread_info, at the bottom of the kernel stack: keep at least
    # Debian's 16 KiB of stack above it.
    stack_order=2
    while (( (4096 << stack_order) < fp_bytes + 16384 )); do stack_order=$((stack_order + 1)); done

    version=""
    if dpkg-query -W -f='${db:Status-Status}' "$source_package" 2>/dev/null | grep -qx installed; then
        version=$(dpkg-query -W -f='${Version}' "$source_package")
    fi
    # The recipe's identity: what decides the kernel built, not this script's wording.
    recipe=4
    key=$( { echo "recipe $recipe $variant fp $fp_bytes stack $stack_order source ${version:-unknown}"
             cat "$patch" "$fragment"; zcat "$debian_config" 2>/dev/null; } | sha256sum | cut -c1-12)
    [[ $mode == key ]] && { echo "$key"; exit 0; }

    find_cached() {
        local d
        for d in "$cache"/*linux-*-um-"$key"; do
            [[ -x $d/linux && -f $d/build.json ]] && { echo "$d/linux"; return 0; }
        done
        return 1
    }
    if found=$(find_cached); then
        say "cached: $found"
        echo "$found"
        exit 0
    fi
    [[ $mode == check ]] && { say "no kernel built yet for key $key under $cache"; exit 1; }

    [[ -r $debian_config ]] || die "$debian_config missing: install user-mode-linux first (scripts/install.sh)"
    need=()
    for p in "$source_package" bc flex bison gcc libc6-dev make xz-utils patch; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || need+=("$p")
    done
    if ((${#need[@]})); then
        [[ $(id -u) == 0 ]] || die "needs root to install: ${need[*]} (run with sudo)"
        say "installing ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
        version=$(dpkg-query -W -f='${Version}' "$source_package")
        key=$("$0" --key --fp-bytes "$fp_bytes" $([[ $variant == tiny ]] && echo --tiny) \
              ${extra:+--extra-config "$extra"})  # the version is in the key
    fi
    upstream=${version%%-*}

    out=$cache/linux-$upstream-um-$key
    [[ $variant == tiny ]] && out=$cache/tiny-linux-$upstream-um-$key
    [[ -n $extra ]] && out=$cache/$(basename "$extra" .config)-linux-$upstream-um-$key
    tree=$out/src
    rm -rf "$out"
    mkdir -p "$tree"
    ticker=""
    cleanup() { [[ -n $ticker ]] && kill "$ticker" 2>/dev/null; rm -rf "$tree" ${merged:+"$merged"}; }
    trap cleanup EXIT
    trap 'say "interrupted; nothing cached"; rm -rf "$out"; exit 130' INT TERM
    start=$(date +%s)

    say "unpacking $source_package $version"
    tar -xf /usr/src/linux-source-6.1.tar.xz -C "$tree" --strip-components=1
    cd "$tree"
    patch -s -p1 < "$patch"
    sed -i "s/^#define UML_HOST_FP_BYTES 12288$/#define UML_HOST_FP_BYTES $fp_bytes/" arch/x86/um/user-offsets.c
    grep -q "^#define UML_HOST_FP_BYTES $fp_bytes$" arch/x86/um/user-offsets.c || die "the patch did not set the FP buffer"

    if [[ $variant == tiny ]]; then
        say "configuring: tinyconfig and scripts/uml-kernel/tiny.config, FP buffer $fp_bytes bytes"
        make -s ARCH=um tinyconfig >/dev/null 2>&1
        base=$(cat .config)
    else
        say "configuring: Debian's UML configuration, the testbed's modules built in, no other module, FP buffer $fp_bytes bytes"
        base=$(zcat "$debian_config" | sed -E 's/^(CONFIG_[A-Z0-9_]+)=m$/# \1 is not set/')
    fi
    { echo "$base"
      grep -E '^(CONFIG_|# CONFIG_)' "$fragment"
      echo "CONFIG_KERNEL_STACK_ORDER=$stack_order"
      echo 'CONFIG_LOCALVERSION="-itb"'
      echo 'CONFIG_SYSTEM_TRUSTED_KEYS=""'
      echo 'CONFIG_SYSTEM_REVOCATION_KEYS=""'
    } > .config
    make -s ARCH=um olddefconfig 2>/dev/null
    # Every line of the fragment must have survived olddefconfig (a dependency can silently undo one).
    lost=()
    while read -r line; do
        if [[ $line =~ ^(CONFIG_[A-Z0-9_]+)=y$ ]]; then
            grep -qx "$line" .config || lost+=("${BASH_REMATCH[1]}=y")
        elif [[ $line =~ ^#\ (CONFIG_[A-Z0-9_]+)\ is\ not\ set$ ]]; then
            ! grep -q "^${BASH_REMATCH[1]}=" .config || lost+=("${BASH_REMATCH[1]} off")
        fi
    done < <(grep -E '^(CONFIG_|# CONFIG_)' "$fragment")
    ((${#lost[@]} == 0)) || die "the configuration lost ${lost[*]}; not building"

    say "building with $jobs jobs (about $([[ $variant == tiny ]] && echo 4 || echo 9) minutes on 2 CPUs; log: $out/build.log)"
    ( while sleep 30; do say "... $(( $(date +%s) - start )) s, $(find . -name '*.o' | wc -l) objects"; done ) &
    ticker=$!
    if ! make ARCH=um -j"$jobs" linux >"$out/build.log" 2>&1; then
        tail -30 "$out/build.log" >&2
        die "build failed; the log is $out/build.log"
    fi
    kill "$ticker" 2>/dev/null || true
    ticker=""
    strip -o "$out/linux" linux
    cp .config "$out/config"
    elapsed=$(( $(date +%s) - start ))
    printf '{"origin": "recipe", "variant": "%s", "key": "%s", "recipe": %s, "version": "%s", "package_version": "%s",
 "release": "%s", "fp_bytes": %s, "kernel_stack_order": %s, "build_s": %s, "jobs": %s, "built": "%s"}\n' \
        "$variant" "$key" "$recipe" "$upstream" "$version" "$(make -s ARCH=um kernelrelease)" "$fp_bytes" \
        "$stack_order" "$elapsed" "$jobs" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$out/build.json.tmp"
    mv "$out/build.json.tmp" "$out/build.json"  # last: a build.json means a whole kernel
    say "built $out/linux in $elapsed s"
    echo "$out/linux"
}

main "$@"; exit
