#!/usr/bin/env bash
# End-to-end check of compactd's observability against a real Prometheus (Debian's package):
#   1. promtool check rules on deploy/prometheus/alerts.yml and its unit tests (alerts_test.yml);
#   2. compactd serve (ops listener, metrics token) in front of `compactd fake-upstream`;
#   3. Prometheus with deploy/prometheus/prometheus.yml adapted to loopback ports, a 1s scrape
#      interval and the token;
#   4. a scripted conversation with compactions (TestE2EDrive in proxy/metrics_e2e_test.go);
#   5. every PromQL expression in deploy/grafana/dashboards/*.json and every loaded alert rule run
#      through Prometheus's /api/v1/query (TestE2EPromQL): fails if one is invalid or if a
#      compaction panel returns no data.
# Everything binds 127.0.0.1, each wait is bounded, and every process started here is stopped on
# exit. Usage: bash .ci/prometheus-e2e.sh (root, or prometheus already installed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export PATH="/usr/local/go/bin:$PATH"

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "prometheus-e2e: installing Debian's prometheus"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq prometheus >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq prometheus >/dev/null
  fi
fi
# The Debian package may start its own service on :9090; this script never uses that one.

work=$(mktemp -d)
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ $rc -ne 0 ]; then
    echo "prometheus-e2e: FAILED; last compactd log lines:" >&2
    tail -n 20 "$work/compactd.log" >&2 2>/dev/null || true
    tail -n 20 "$work/prometheus.log" >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT

# free_port prints a loopback port nothing listens on.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "prometheus-e2e: no free port" >&2
  return 1
}

# wait_for URL [HEADER]: until URL answers 2xx, at most 60s.
wait_for() {
  local url=$1 hdr=${2:-X-None: 1}
  for _ in $(seq 1 120); do
    if curl -fsS -o /dev/null -H "$hdr" "$url" 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  echo "prometheus-e2e: $url did not come up" >&2
  return 1
}

echo "prometheus-e2e: promtool check rules"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

echo "prometheus-e2e: building compactd and the test helpers"
go build -o "$work/compactd" ./cmd/compactd
go test -c -o "$work/proxy.test" ./proxy

up_port=$(free_port)
px_port=$(free_port)
ops_port=$(free_port)
prom_port=$(free_port)
token="e2e-$RANDOM$RANDOM"

"$work/compactd" fake-upstream --listen "127.0.0.1:$up_port" >"$work/fake.log" 2>&1 &
pids+=($!)
COMPACTD_METRICS_TOKEN="$token" "$work/compactd" serve \
  --listen "127.0.0.1:$px_port" --ops-listen "127.0.0.1:$ops_port" \
  --upstream "http://127.0.0.1:$up_port" --anthropic-upstream "http://127.0.0.1:$up_port" \
  --data-dir "$work/data" --ready-check-upstream --log-format json --retain-tokens 1000 \
  >"$work/compactd.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$ops_port/readyz"
if curl -fsS -o /dev/null "http://127.0.0.1:$ops_port/metrics" 2>/dev/null; then
  echo "prometheus-e2e: /metrics answered without the token" >&2
  exit 1
fi

# The deploy scrape config, adapted: loopback target, 1s intervals, rule file and token here.
printf '%s' "$token" >"$work/token"
cp deploy/prometheus/alerts.yml "$work/alerts.yml"
sed -e "s#compactd:9464#127.0.0.1:$ops_port#" \
    -e "s#scrape_interval: 15s#scrape_interval: 1s#" \
    -e "s#evaluation_interval: 15s#evaluation_interval: 1s#" \
    -e "s#/etc/prometheus/rules/compactd-alerts.yml#$work/alerts.yml#" \
    -e "s|    # authorization:|    authorization:|" \
    -e "s|    #   credentials_file: /etc/prometheus/compactd-metrics-token|      credentials_file: $work/token|" \
    deploy/prometheus/prometheus.yml >"$work/prometheus.yml"
grep -q "127.0.0.1:$ops_port" "$work/prometheus.yml" && grep -q "credentials_file: $work/token" "$work/prometheus.yml" || {
  echo "prometheus-e2e: could not adapt deploy/prometheus/prometheus.yml" >&2
  exit 1
}
promtool check config "$work/prometheus.yml" >/dev/null

prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
prom="http://127.0.0.1:$prom_port"
wait_for "$prom/-/ready"

# A first scrape before the conversation, so rate() sees the counters move from zero.
for _ in $(seq 1 60); do
  if curl -fsS "$prom/api/v1/query" --data-urlencode 'query=up{job="compactd"} == 1' | grep -q '"value"'; then break; fi
  sleep 0.5
done

echo "prometheus-e2e: driving a scripted conversation through compactd"
COMPACTD_E2E_PROXY="http://127.0.0.1:$px_port" timeout 180 "$work/proxy.test" -test.run '^TestE2EDrive$' -test.count=1

# Wait until Prometheus has scraped the compactions, then a few more scrapes for rate windows.
for i in $(seq 1 60); do
  if curl -fsS "$prom/api/v1/query" --data-urlencode 'query=sum(compactd_compactions_total{outcome="ok"}) >= 12' | grep -q '"value"'; then break; fi
  if [ "$i" = 60 ]; then echo "prometheus-e2e: compactions never showed up in Prometheus" >&2; exit 1; fi
  sleep 0.5
done
sleep 3

echo "prometheus-e2e: evaluating dashboard and alert-rule PromQL"
if ! COMPACTD_E2E_PROMETHEUS="$prom" COMPACTD_E2E_DASHBOARDS="$root/deploy/grafana/dashboards" \
  timeout 120 "$work/proxy.test" -test.run '^TestE2EPromQL$' -test.count=1 -test.v >"$work/promql.out" 2>&1; then
  cat "$work/promql.out" >&2
  exit 1
fi
grep -o 'checked [0-9]* expressions.*' "$work/promql.out" || true
echo "prometheus-e2e: ok"
