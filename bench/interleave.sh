#!/usr/bin/env bash
# Runs Go benchmarks interleaved — every benchmark (and, with -b, every tree) once per round —
# and prints the median of each figure per benchmark and tree. On a shared machine the load
# drifts while a benchmark runs; `-count N` runs all of one benchmark before the next, so the
# drift lands on one side of a comparison (deep before flat, old before new). Interleaving puts
# it on both.
#
# Usage: bench/interleave.sh [-r ROUNDS] [-t BENCHTIME] [-b REV] PKG BENCH...
#   PKG    a package directory, e.g. ./internal/compact
#   BENCH  a benchmark name as -bench takes it, anchored for you, e.g. NestingWalk/deep
#   -b REV also build PKG from git revision REV and run it beside the working tree (A/B)
# Example: bench/interleave.sh -r 5 -t 20x ./internal/compact NestingWalk/deep NestingWalk/flat
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5 benchtime=1s base=""
while getopts "r:t:b:" o; do
  case $o in
    r) rounds=$OPTARG ;;
    t) benchtime=$OPTARG ;;
    b) base=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
pkg=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

trees=(head)
go test -c -o "$work/head.test" "$pkg"
dirs=("$(go list -f '{{.Dir}}' "$pkg")")
if [ -n "$base" ]; then
  mkdir "$work/src"
  git archive "$base" | tar -x -C "$work/src"
  (cd "$work/src" && go test -c -o "$work/base.test" "$pkg")
  trees+=(base)
  dirs+=("$work/src/${pkg#./}")
fi

for r in $(seq "$rounds"); do
  for b in "$@"; do
    for i in "${!trees[@]}"; do
      (cd "${dirs[$i]}" && "$work/${trees[$i]}.test" -test.run '^$' -test.bench "^Benchmark${b}\$" \
        -test.benchtime "$benchtime" -test.benchmem) | grep '^Benchmark' | sed "s/^/${trees[$i]} /"
    done
  done
  echo "round $r/$rounds done: $(uptime)" >&2
done | tee "$work/all" >/dev/null

# Median of every "<value> <unit>" pair per tree and benchmark.
awk '{
  key = $1 " " $2
  for (i = 4; i < NF; i += 2) { n = ++cnt[key, $(i + 1)]; v[key, $(i + 1), n] = $i; units[key, $(i + 1)] = 1 }
  if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
}
END {
  for (k = 1; k <= nk; k++) {
    line = order[k]
    for (ku in units) {
      split(ku, p, SUBSEP)
      if (p[1] != order[k]) continue
      n = cnt[p[1], p[2]]
      for (i = 1; i <= n; i++) a[i] = v[p[1], p[2], i] + 0
      for (i = 2; i <= n; i++) { x = a[i]; j = i - 1; while (j > 0 && a[j] > x) { a[j + 1] = a[j]; j-- } a[j + 1] = x }
      med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      line = line (med >= 1000 ? sprintf("  %s %.0f", p[2], med) : sprintf("  %s %.4g", p[2], med))
    }
    print line " (median of " cnt[order[k], "ns/op"] ")"
  }
}' "$work/all"
