#!/usr/bin/env bash
# Runs every fuzz target in the module for a short, bounded time each. Targets are discovered
# with `go test -list`, so a new Fuzz* function is picked up without editing this script. A
# failure leaves the crashing input under the package's testdata/fuzz/<Name>/ (commit it: it
# becomes a regression test that plain `go test` runs).
#
# Usage: .ci/fuzz.sh [fuzztime] [packages...]   e.g. .ci/fuzz.sh 10s ./internal/api ./proxy
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cachedir="$(go env GOCACHE)/fuzz"
for pkg in "${pkgs[@]}"; do
  [ -n "$pkg" ] || continue
  # -list prints matching test names, then "ok <pkg> <time>"; keep the Fuzz* names only.
  targets=$(go test -list '^Fuzz' "$pkg" | grep -E '^Fuzz' || true)
  [ -n "$targets" ] || continue
  # One instrumented test binary per package (linking is most of the cost), run once per target
  # from the package directory, so testdata/fuzz/<Name> seeds are read and crashers land there.
  bin="$work/$(echo "$pkg" | tr '/.' '__').test"
  go test -c -fuzz=. -o "$bin" "$pkg"
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $targets; do
    total=$((total + 1))
    echo "fuzz: $pkg $target ($fuzztime)"
    ok=false
    # The fuzzing engine itself can end a timed run with a bare "context deadline exceeded" when a
    # worker is slow to answer as the time runs out (a loaded machine): no input failed, nothing
    # was written to testdata. That run is repeated once; a crasher, or the same end twice, fails.
    for attempt in 1 2; do
      if (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
            -test.parallel 2 -test.fuzzcachedir "$cachedir") >"$work/log" 2>&1; then
        ok=true
        break
      fi
      if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' "$work/log" && ! grep -q 'Failing input written' "$work/log"; then
        echo "fuzz: $target: the engine's deadline ended the run with no failing input; once more"
        continue
      fi
      break
    done
    if ! $ok; then
      cat "$work/log"
      failed+=("$pkg $target")
    else
      tail -n 1 "$work/log"
    fi
  done
done

echo "fuzz: $total targets run, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: FAILED %s\n' "${failed[@]}"
  exit 1
fi
