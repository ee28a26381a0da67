#!/usr/bin/env bash
# Runs every fuzz target in the module for a short, bounded time each. Targets are discovered
# with `go test -list`, so a new Fuzz* function is picked up without editing this script. A
# failure leaves the crashing input under the package's testdata/fuzz/<Name>/ (commit it: it
# becomes a regression test that plain `go test` runs).
#
# Usage: .ci/fuzz.sh [fuzztime] [packages...]   e.g. .ci/fuzz.sh 10s ./api ./proxy
# FUZZTIME overrides the default of 10s per target when no argument is given.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

fuzztime="${1:-${FUZZTIME:-10s}}"
shift || true
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  # Only packages with test files can hold fuzz targets.
  mapfile -t pkgs < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
fi

failed=()
total=0
for pkg in "${pkgs[@]}"; do
  [ -n "$pkg" ] || continue
  # -list prints matching test names, then "ok <pkg> <time>"; keep the Fuzz* names only.
  targets=$(go test -list '^Fuzz' "$pkg" | grep -E '^Fuzz' || true)
  for target in $targets; do
    total=$((total + 1))
    echo "fuzz: $pkg $target ($fuzztime)"
    # -run '^$' skips the unit tests; -fuzz needs an anchored name since targets may share a prefix.
    if ! go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -parallel 2 >/tmp/fuzz.$$.log 2>&1; then
      cat /tmp/fuzz.$$.log
      failed+=("$pkg $target")
    else
      tail -n 1 /tmp/fuzz.$$.log
    fi
  done
done
rm -f /tmp/fuzz.$$.log

echo "fuzz: $total targets run, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: FAILED %s\n' "${failed[@]}"
  exit 1
fi
