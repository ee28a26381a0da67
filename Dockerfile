# syntax=docker/dockerfile:1
#
# compactd container image: a static binary on distroless/static, running as nonroot.
#
#   docker build -t compactd --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm -p 8080:8080 -e COMPACTD_KEYS -e COMPACTD_UPSTREAM=https://api.openai.com compactd
#
# Keys never go into the image: pass the keyring in COMPACTD_KEYS, or mount a keyring file
# (owned by uid 65532, mode 0600) and set COMPACTD_KEY_FILE=/run/secrets/compactd-keyring.
# With neither, `serve` generates a keyring in COMPACTD_DATA_DIR: keep that on a volume, and
# never do this with more than one replica (they must share one keyring).

# The builder is the latest Go patch release, not go.mod's minimum (1.26.8): go1.26.8's standard
# library has called vulnerabilities fixed in 1.26.9 and 1.26.10 (net/http, net/textproto,
# crypto/tls, crypto/x509; .ci/govulncheck.sh lists them, SECURITY.md "Dependencies and the
# toolchain"). Raise it with each patch release.
ARG GO_VERSION=1.26.10

# Build stage: runs deploy/build.sh, the same build line CI tests. It builds on the build
# machine's platform and cross-compiles (CGO is off), so multi-arch builds need no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION deploy/build.sh /out/compactd
# The data directory, created here because the runtime image has no shell to mkdir with; a
# named volume mounted on it starts out with this owner.
RUN mkdir -p /out/data

# Runtime: no shell, no package manager, no libc; uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/compactd /compactd
COPY --from=build --chown=65532:65532 --chmod=0700 /out/data /var/lib/compactd
ENV COMPACTD_LISTEN=0.0.0.0:8080 \
    COMPACTD_DATA_DIR=/var/lib/compactd \
    COMPACTD_LOG_FORMAT=json
VOLUME ["/var/lib/compactd"]
USER nonroot
EXPOSE 8080
# Exec form: the binary probes itself (GET /healthz on COMPACTD_LISTEN); there is no shell.
HEALTHCHECK --interval=15s --timeout=5s --start-period=5s --retries=3 CMD ["/compactd", "healthcheck"]
# SIGTERM drains in-flight requests and streams for COMPACTD_SHUTDOWN_GRACE (default 30s):
# give `docker stop` a longer timeout (-t 35) than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/compactd"]
CMD ["serve"]
