#!/usr/bin/env bash
# govulncheck over the whole module, offline. vuln.go.dev cannot be reached from the build
# machines, so the vulnerability database is built locally from the golang.org/x/vulndb module's
# OSV files (pinned below; bump the version to refresh) with vulndb's own indexdb tool, and
# govulncheck reads it with -db file://.
#
# Fails on any called vulnerability in a module we require. Called vulnerabilities in the Go
# standard library are reported but do not fail the run: they are fixed by a newer Go patch
# release than the toolchain this machine has; release builds must use the latest patch release
# (see SECURITY.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

VULN_VERSION=v1.9.0
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
osv="$(GOFLAGS= go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')/data/osv"
(cd "$work" && GOFLAGS= go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$osv" -out "$work/db")

set +e
GOFLAGS= go run "golang.org/x/vuln/cmd/govulncheck@$VULN_VERSION" -db "file://$work/db" -format json ./... > "$work/out.json"
set -e
# Findings whose trace reaches a function are called; group them by module.
called=$(jq -r 'select(.finding != null and .finding.trace[0].function != null)
                | "\(.finding.trace[0].module)\t\(.finding.osv)\t\(.finding.fixed_version // "no fix")"' "$work/out.json" | sort -u)
modules=$(printf '%s\n' "$called" | awk -F'\t' '$1 != "" && $1 != "stdlib"')
stdlib=$(printf '%s\n' "$called" | awk -F'\t' '$1 == "stdlib"')
if [ -n "$stdlib" ]; then
  echo "govulncheck: called vulnerabilities in the Go standard library of $(go version | awk '{print $3}') (fixed by a newer patch release):"
  printf '%s\n' "$stdlib" | sed 's/^/  /'
fi
if [ -n "$modules" ]; then
  echo "govulncheck: called vulnerabilities in required modules:"
  printf '%s\n' "$modules" | sed 's/^/  /'
  exit 1
fi
echo "govulncheck: no called vulnerabilities in required modules"
