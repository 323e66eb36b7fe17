#!/usr/bin/env bash
# Install everything IPsec Testbed needs on Debian/Ubuntu, idempotently.
#
#   scripts/install.sh            system packages (apt) + virtualenv at .venv
#   scripts/install.sh --check    only report what is missing; exit 1 if anything is
#
# Quick when nothing is missing: dpkg is asked which packages are absent and apt runs
# only for those; pip runs only when setup.py or pyproject.toml changed since the last install.
# Used by ./run, .ci/run and the Vagrantfile, so all three install the same things.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$here/.venv"
stamp="$venv/.ipsec-testbed-installed"
python=${PYTHON:-/usr/bin/python3}

# What the testbed runs, and why:
#   iproute2 (ip, tc: the independent checker in tests), iperf3 (measurements),
#   mininet (mnexec), user-mode-linux (an ESP-capable kernel when the host has none),
#   kmod (modprobe inside UML), iputils-ping (ping: the sweep's latency probe), tcpdump (scapy compiles
#   capture filters with it),
#   procps, psmisc, python3-venv (the .venv), chromium (renders report.html in tests),
#   chromium-driver (a test drives the web demo's page in Chromium, through Selenium),
#   ruby (the tests evaluate the Vagrantfile, which is Ruby), tmux (a test drives the demo in a terminal),
#   qemu-system-x86, gcc and libc6-dev (the counted backend, --kernel qemu: an x86-64 kernel in QEMU's emulator
#   and the plugin that counts its instructions, built here),
#   strongSwan's charon, swanctl and its OpenSSL and GCM plugins (keying by IKE, --keying ike),
#   irtt (the sweep's other latency probe, the demo's and `bench rrul`'s, as flent uses it), flent (its
#   ping test, the outside check of that probe in `bench rrul --flent`), wireguard-tools (`wg show` beside the testbed's WireGuard; the
#   testbed configures WireGuard over netlink and never runs it), postgresql (a real server, started by the
#   tests on a port of their own, for a team's shared history, --history postgresql://...; the package's own
#   cluster is not used).
apt_packages=(iproute2 iperf3 mininet user-mode-linux kmod iputils-ping tcpdump procps
              python3 python3-venv chromium chromium-driver ruby tmux qemu-system-x86 gcc libc6-dev
              strongswan-charon strongswan-swanctl libstrongswan-standard-plugins irtt flent wireguard-tools
              postgresql)

say() { printf 'install: %s\n' "$*" >&2; }

missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done

if [[ ${1:-} == --check ]]; then
    rc=0
    ((${#missing[@]})) && { say "missing packages: ${missing[*]}"; rc=1; }
    [[ -f $stamp && $stamp -nt $here/setup.py && $stamp -nt $here/pyproject.toml ]] ||
        { say "virtualenv .venv missing or stale"; rc=1; }
    if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import sys; from testbed import umlkernel
sys.exit(0 if umlkernel.needs_build() else 1)'; then
        say "Debian's linux.uml cannot boot on this CPU, and the project's UML kernel is not built"; rc=1
    fi
    if [[ -x $venv/bin/python ]] && ! "$venv/bin/python" -c 'import sys; from testbed import qemukernel
sys.exit(0 if qemukernel.debian() else 1)'; then
        say "the counted backend's kernel is not fetched (ipsec-testbed kernel fetch)"; rc=1
    fi
    exit $rc
fi

if ((${#missing[@]})); then
    if [[ $(id -u) != 0 ]]; then
        say "needs root to install: ${missing[*]} (run with sudo)"
        exit 1
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine has no package lists; refresh them once, then install.
    apt-get update -qq
    # strongSwan's packages start a daemon in the host's own network namespace when installed;
    # the testbed runs its daemons only inside its namespaces, so the services are masked and,
    # for this install, invoke-rc.d is told to start nothing.
    if [[ " ${missing[*]} " == *" strongswan-"* ]]; then
        if command -v systemctl >/dev/null; then
            systemctl mask strongswan-starter.service >/dev/null 2>&1 || true  # the one strongswan-charon pulls in
        fi
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            printf '#!/bin/sh\n# ipsec-testbed install: start no service while packages install\nexit 101\n' \
                > /usr/sbin/policy-rc.d
            chmod 755 /usr/sbin/policy-rc.d
            trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        fi
    fi
    # No recommends: mininet recommends openvswitch-switch, which the testbed does not use.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# strongSwan's AppArmor profiles let charon and swanctl read only /etc and use only /run; the
# testbed's daemons keep their files in an owner-only directory of their own (ipsec/ike.py), so
# the profiles' local additions name those directories, and enforced profiles are reloaded.
apparmor_rules() {  # $1: the profile, $2: the rule for the testbed's directories
    local file=/etc/apparmor.d/local/$1 mark="# ipsec-testbed: its IKE daemons' directories"
    [[ -e /etc/apparmor.d/$1 ]] || return 0
    grep -qF "$mark" "$file" 2>/dev/null && return 0
    printf '%s\n%s\n' "$mark" "$2" >> "$file"
    if command -v apparmor_parser >/dev/null && [[ -d /sys/kernel/security/apparmor ]]; then
        apparmor_parser -r "/etc/apparmor.d/$1" >/dev/null 2>&1 || say "could not reload AppArmor profile $1"
    fi
}
if [[ $(id -u) == 0 ]]; then
    apparmor_rules usr.lib.ipsec.charon "  /{tmp,dev/shm}/itb-*-ike-*/** rwk,"
    apparmor_rules usr.sbin.swanctl "  /{tmp,dev/shm}/itb-*-ike-*/** rw,"
fi

if [[ ! -f $stamp || $here/setup.py -nt $stamp || $here/pyproject.toml -nt $stamp ]]; then
    say "creating virtualenv $venv"
    [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$here[test]"
    touch "$stamp"
fi

# The counted backend's kernel (Debian's linux-image-amd64, downloaded and unpacked into the cache, not installed)
# and its instruction-counting plugin: once, then at once.
if ! "$venv/bin/ipsec-testbed" kernel fetch >/dev/null; then
    say "could not fetch the counted backend's kernel (above); \`sudo $venv/bin/ipsec-testbed kernel fetch\` tries again"
    exit 1
fi

# A UML kernel that boots on this CPU: Debian's where its FPU buffer holds this CPU's XSAVE area,
# else the project's (`ipsec-testbed kernel build`: the recipe, built once, then cached by its key).
if ! "$venv/bin/ipsec-testbed" kernel build >/dev/null; then
    say "could not build the project's UML kernel (above); \`sudo $venv/bin/ipsec-testbed kernel build\` tries again"
    exit 1
fi
