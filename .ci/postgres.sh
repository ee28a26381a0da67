#!/usr/bin/env bash
# Idempotent local PostgreSQL for the archive package's conformance suite.
#
# Installs PostgreSQL (Debian/Ubuntu packages) if missing, makes sure one cluster
# is running and listening on 127.0.0.1 only, creates role `compactd` and database
# `compactd_test` owned by it, and prints the line to export:
#
#   eval "$(.ci/postgres.sh)"      # sets COMPACTD_TEST_POSTGRES_DSN
#
# Everything but the final export line goes to stderr so the eval above works.
# Safe to run repeatedly. Needs root (or passwordless sudo).
set -euo pipefail

ROLE="${COMPACTD_PG_ROLE:-compactd}"
PASS="${COMPACTD_PG_PASSWORD:-compactd}"
DB="${COMPACTD_PG_DB:-compactd_test}"

log() { echo "postgres.sh: $*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi

# 1. Install.
if ! command -v pg_lsclusters >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  log "installing postgresql"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi

# 2. A cluster: use the first existing one, or create "main" for the newest version.
read -r VER NAME PORT < <(pg_lsclusters -h 2>/dev/null | awk 'NR==1{print $1, $2, $3}') || true
if [ -z "${VER:-}" ]; then
  VER="$(ls /usr/lib/postgresql | sort -V | tail -1)"
  NAME=main
  log "creating cluster $VER/$NAME"
  $SUDO pg_createcluster "$VER" "$NAME" >&2
  read -r VER NAME PORT < <(pg_lsclusters -h | awk -v v="$VER" -v n="$NAME" '$1==v && $2==n{print $1, $2, $3}')
fi

# Listen on loopback only; tests never leave 127.0.0.1.
CONF="/etc/postgresql/$VER/$NAME/postgresql.conf"
if ! $SUDO grep -q "^listen_addresses = '127.0.0.1'" "$CONF"; then
  log "setting listen_addresses=127.0.0.1 in $CONF"
  echo "listen_addresses = '127.0.0.1'" | $SUDO tee -a "$CONF" >/dev/null
  if pg_lsclusters -h | awk -v v="$VER" -v n="$NAME" '$1==v && $2==n && $4=="online"{f=1} END{exit !f}'; then
    $SUDO pg_ctlcluster "$VER" "$NAME" restart >&2
  fi
fi

# 3. Start (pg_ctlcluster works without systemd, e.g. in containers).
if ! pg_lsclusters -h | awk -v v="$VER" -v n="$NAME" '$1==v && $2==n && $4=="online"{f=1} END{exit !f}'; then
  log "starting cluster $VER/$NAME on port $PORT"
  $SUDO pg_ctlcluster "$VER" "$NAME" start >&2
fi
for _ in $(seq 1 30); do
  if pg_isready -q -h 127.0.0.1 -p "$PORT"; then break; fi
  sleep 1
done
pg_isready -h 127.0.0.1 -p "$PORT" >&2

# 4. Role and database (password auth over TCP is the Debian default: scram-sha-256).
psql_admin() { $SUDO runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" "$@"; }
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
  log "creating role $ROLE"
  psql_admin -c "CREATE ROLE \"$ROLE\" LOGIN PASSWORD '$PASS'" >&2
else
  psql_admin -c "ALTER ROLE \"$ROLE\" LOGIN PASSWORD '$PASS'" >&2
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
  log "creating database $DB"
  psql_admin -c "CREATE DATABASE \"$DB\" OWNER \"$ROLE\"" >&2
fi

echo "export COMPACTD_TEST_POSTGRES_DSN='postgres://$ROLE:$PASS@127.0.0.1:$PORT/$DB?sslmode=disable'"
