#!/usr/bin/env bash
# The project as a wheel, installed like any Python tool, used outside the checkout.
#
#   scripts/wheel-smoke.sh        (root: the last step measures; .ci/run runs it after the tests)
#
# Builds the wheel from this checkout, installs it into a fresh virtualenv in a temporary
# directory, and from there (not the checkout) runs: `doctor`; `report` on a copy of each seed's
# stored run (examples/runs/seedNNN: small real runs, kept in the repository); a sweep's
# --dry-run; a benchmark (UML's boot, by the installed code); and one short real sweep (in
# User-Mode Linux where the host kernel lacks ESP). It checks the kernel recipe came along too.
# Exit status: non-zero at the first step that fails, which it names.
set -euo pipefail

main() {
    local here venv
    step=start
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    tmp=$(mktemp -d /tmp/ipsec-testbed-wheel.XXXXXX)  # global: the EXIT trap runs after main returns
    trap 'rm -rf "$tmp"' EXIT
    venv=$tmp/venv
    say() { printf 'wheel-smoke: %s\n' "$*" >&2; }
    step() { step=$1; say "$1"; }
    trap 'say "FAILED at: $step"' ERR

    step "building the wheel"
    "$here/.venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$tmp/dist" "$here" \
        >/dev/null 2>"$tmp/wheel.log" || { cat "$tmp/wheel.log" >&2; false; }
    rm -rf "$here/build"  # pip's build tree in the checkout
    step "installing it into a fresh virtualenv ($venv)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$tmp"/dist/*.whl
    cd "$tmp"  # from here on, nothing of the checkout is on the path
    "$venv/bin/python" -c 'import analysis, sys; assert "site-packages" in analysis.__file__, analysis.__file__'

    step "the reference data installed"
    "$venv/bin/pip" show -f ipsec-testbed | grep -c 'analysis/reference/seed00[0-4].json' | grep -qx 5

    step "the kernel recipe installed: the same recipe, the same kernel"
    local key
    local recipe='from testbed import kernelbuild as k, kernelsource as s
print(k.RECIPE_DIR, k.plan(s.parse("recipe")).key)'
    key=$("$venv/bin/python" -c "$recipe")
    [[ ${key%% *} == "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("data"))')"/* ]] ||
        { say "the installed recipe is not the wheel's: $key"; false; }
    [[ ${key##* } == "$(cd "$here" && .venv/bin/python -c "$recipe" | cut -d" " -f2)" ]] ||
        { say "recipe key ${key##* } differs from the checkout's"; false; }
    step "ipsec-testbed kernel list"
    "$venv/bin/ipsec-testbed" kernel list >/dev/null

    step "ipsec-testbed doctor"
    "$venv/bin/ipsec-testbed" doctor >/dev/null

    local run seed
    for run in "$here"/examples/runs/seed00?; do
        seed=$(basename "$run")
        step "ipsec-testbed report on a copy of examples/runs/$seed"
        cp -r "$run" "$tmp/$seed"
        "$venv/bin/ipsec-testbed" report "$tmp/$seed" >"$tmp/$seed.txt"
        [[ -s $tmp/$seed/report.html ]]
        # at least one of the seed's claims judged from the stored numbers
        "$venv/bin/python" -c 'import json, sys
claims = json.load(open(sys.argv[1]))["claims"]
sys.exit(not any(c["verdict"] != "not measured" for c in claims))' "$tmp/$seed/comparison.json"
    done

    step "ipsec-testbed sweep --dry-run"
    "$venv/bin/ipsec-testbed" sweep --dry-run >/dev/null 2>&1

    step "a benchmark from the wheel: ipsec-testbed bench uml_overhead --repeat 1"
    "$venv/bin/ipsec-testbed" bench uml_overhead --repeat 1 </dev/null >"$tmp/bench.txt" 2>&1 ||
        { tail -20 "$tmp/bench.txt" >&2; false; }

    step "one short real sweep"
    "$venv/bin/ipsec-testbed" sweep --rates 10 --sizes 1460 --repetitions 1 --duration 1 --no-report \
        --out "$tmp/sweep" </dev/null >"$tmp/sweep.txt" 2>&1 || { tail -20 "$tmp/sweep.txt" >&2; false; }
    grep -q "measured 2 points" "$tmp/sweep.txt"
    say "ok: the wheel works outside the checkout"
}

main "$@"
