#!/bin/sh
# The one build of the compactd binary. The Dockerfile's build stage and the tests run this
# script, so what CI tests is exactly what ships: a static binary (CGO_ENABLED=0, no libc, runs
# on distroless/static), reproducible (-trimpath drops local paths, -buildvcs=false leaves out
# the checkout state, which a Docker build context does not have), with the version stamped in.
#
#   deploy/build.sh [OUTPUT]         default OUTPUT: ./compactd
#
# Environment: VERSION (default: git describe, else "dev"); GOOS/GOARCH for cross builds.
set -eu

out=${1:-compactd}
case $out in /*) ;; *) out=$PWD/$out ;; esac # relative to the caller, not the repo
cd "$(dirname "$0")/.."
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}

CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${version}" -o "$out" ./cmd/compactd
