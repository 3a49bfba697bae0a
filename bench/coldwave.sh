#!/usr/bin/env bash
# bench/coldwave.sh — the catalog's cold wave, repeated: is the hot host's p99 within 2x every time?
#
# Usage:  bash bench/coldwave.sh [--write]
#   --write   also replace the "coldwave.sh" section of docs/benchmarks.md
# Environment (defaults in brackets):
#   STORES     ["sqlite postgres"]  catalog stores to run (postgres needs /usr/lib/postgresql/*/bin)
#   APPS       [200000]  apps in the catalog (one hot app, hot.bench; c-N.cold.bench for the rest)
#   RUNS       [5]       cold waves per store, each against a fresh levee (an empty cache)
#   COLD_HOSTS [5000]    distinct cold hosts per wave    COLD_RATE [600/s]  their rate
#   FACTOR     [2]       the bar: hot p99 during the wave ÷ its p99 before
#   LOADER     [""]      catalog.loader settings to try, a YAML flow map ("{concurrency: 2}");
#                        "" is a new user's: the defaults
#   PORT_BASE  [19240]   levee PORT_BASE, backend +1, admin +2, postgres +3
#   PROFILE    [""]      a directory: each run's 5 s CPU profile of levee from the wave's start
#                        (the admin's /debug/pprof/profile), as STORE-RUN.pprof
#
# Issue 19 point 6: "during 600 distinct cold hosts/s against a 200,000-app catalog, the hot host's
# p99 stays within 2x of its p99 alone in 5 runs of 5, with no pinning". A new user's setup: levee
# with its default loader, no pinning, GOMAXPROCS unset, the catalog imported with `levee catalog
# import`; PostgreSQL as a package installs it (TCP on 127.0.0.1, scram-sha-256 password auth).
# `levee drill cold-catalog` sends the hot host at 100/s for 5 s alone, then beside the wave. One row
# per run; the verdict counts the runs within FACTOR. Runtime: ~20 s per run, plus the imports
# (~15 s for SQLite, ~1 min for PostgreSQL at 200k apps).
set -euo pipefail

BENCH_NAME=coldwave.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 20 "$@"
bench_init levee-coldwave

STORES=${STORES:-sqlite postgres}
APPS=${APPS:-200000}
RUNS=${RUNS:-5}
COLD_HOSTS=${COLD_HOSTS:-5000}
COLD_RATE=${COLD_RATE:-600/s}
FACTOR=${FACTOR:-2}
PORT_BASE=${PORT_BASE:-19240}
LEVEE_PORT=$PORT_BASE BACKEND_PORT=$((PORT_BASE + 1)) ADMIN_PORT=$((PORT_BASE + 2)) PG_PORT=$((PORT_BASE + 3))
check_ports "cold wave bench (set PORT_BASE)" "$LEVEE_PORT" "$BACKEND_PORT" "$ADMIN_PORT" "$PG_PORT"

build_levee || die "levee does not build"
build_bench backend
"$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
PIDS+=($!)

log "writing $APPS apps"
awk -v n="$APPS" -v be="127.0.0.1:$BACKEND_PORT" 'BEGIN {
  printf "{\"name\":\"hot\",\"hosts\":[\"hot.bench\"],\"backends\":[\"%s\"]}\n", be
  for (i = 0; i < n - 1; i++) printf "{\"name\":\"a%d\",\"hosts\":[\"c-%d.cold.bench\"],\"backends\":[\"%s\"]}\n", i, i, be
}' >"$tmp/apps.jsonl"

# start_postgres — initdb (as the postgres user: postgres refuses root) with a password, listening
# on 127.0.0.1:PG_PORT only; sets PG_DSN
start_postgres() {
  local bin pgdir
  bin=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/postgres | sort -V | tail -1)") || die "no postgres in /usr/lib/postgresql"
  pgdir="$tmp/pg"
  mkdir -p "$pgdir"
  echo bench >"$pgdir/pw"
  chown -R postgres: "$pgdir"
  chmod 711 "$tmp" # postgres reads its password file and data directory under it
  runuser -u postgres -- "$bin/initdb" -D "$pgdir/data" -U levee --pwfile="$pgdir/pw" -A scram-sha-256 \
    -E UTF8 --locale=C --no-instructions >"$tmp/initdb.log" 2>&1 || die "initdb: $(tail -3 "$tmp/initdb.log")"
  runuser -u postgres -- "$bin/postgres" -D "$pgdir/data" -c listen_addresses=127.0.0.1 -p "$PG_PORT" \
    -c unix_socket_directories="$pgdir" >"$tmp/postgres.log" 2>&1 &
  PIDS+=($!)
  PG_DSN="postgres://levee:bench@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
  for _ in $(seq 1 100); do
    runuser -u postgres -- "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && return 0
    sleep 0.1
  done
  die "postgres not ready: $(tail -3 "$tmp/postgres.log")"
}

body="$tmp/body.md"
{
  echo "\`levee serve\` (levee $LEVEE_REV, ${LOADER:+catalog.loader }${LOADER:-its default loader}, no pinning) on a catalog of $APPS apps, a fresh"
  echo "process per run; \`levee drill cold-catalog\` beside it on the same CPUs: the hot host at 100/s for 5 s,"
  echo "then beside $COLD_HOSTS distinct cold hosts at $COLD_RATE. Latency from each request's intended send time."
  echo "$(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg) before the first run. \`bash bench/coldwave.sh\`."
  echo
  echo "| store | run | hot p50 / p99 before, ms | hot p50 / p99 during, ms | hot max during, ms | hot 2xx during | cold 200 / 503 | levee CPU during wave, s | hot p99 during ÷ before |"
  echo "|---|---:|---:|---:|---:|---:|---|---:|---:|"
} >"$body"
verdicts=()
for store in $STORES; do
  case $store in
    sqlite)
      "$tmp/levee" catalog import --db "$tmp/catalog.db" "$tmp/apps.jsonl" >&2
      catalog="{sqlite: $tmp/catalog.db${LOADER:+, loader: $LOADER}}" ;;
    postgres)
      start_postgres
      log "importing into PostgreSQL"
      "$tmp/levee" catalog import --postgres "$PG_DSN" "$tmp/apps.jsonl" >&2
      catalog="{postgres: \"$PG_DSN\"${LOADER:+, loader: $LOADER}}" ;;
    *) die "unknown store $store (sqlite or postgres)" ;;
  esac
  cat >"$tmp/levee.yaml" <<EOF
listen: 127.0.0.1:$LEVEE_PORT
admin: {addr: 127.0.0.1:$ADMIN_PORT, pprof: true}
catalog: $catalog
EOF
  within=0
  for run in $(seq 1 "$RUNS"); do
    "$tmp/levee" serve --config "$tmp/levee.yaml" >"$tmp/levee.log" 2>&1 &
    lpid=$!
    PIDS+=("$lpid")
    wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 10 || die "levee not ready: $(tail -3 "$tmp/levee.log")"
    log "$store run $run"
    c0=$(cpu_ticks "$lpid")
    # The wave starts after the drill's 5 s of the hot host alone; levee's CPU is read around it.
    (
      sleep 5
      cpu_ticks "$lpid" >"$tmp/c.wave"
      if [[ -n ${PROFILE:-} ]]; then
        mkdir -p "$PROFILE"
        curl -fsS -m 15 -o "$PROFILE/$store-$run.pprof" "http://127.0.0.1:$ADMIN_PORT/debug/pprof/profile?seconds=5" ||
          echo "coldwave: no profile of $store run $run" >&2
      fi
    ) &
    spid=$!
    "$tmp/levee" drill cold-catalog --target "http://127.0.0.1:$LEVEE_PORT" --hot-host hot.bench --duration 10s \
      --cold-domain cold.bench --cold-hosts "$COLD_HOSTS" --cold-rate "$COLD_RATE" --json >"$tmp/drill.json" 2>"$tmp/drill.err" || true
    c1=$(cpu_ticks "$lpid")
    wait "$spid"
    log "levee CPU ticks: start $c0, wave start $(cat "$tmp/c.wave" 2>/dev/null), end $c1"
    python3 - "$tmp/drill.json" "$store" "$run" "$FACTOR" "$(cat "$tmp/c.wave" 2>/dev/null || echo "$c0")" "$c1" "$(getconf CLK_TCK)" >>"$body" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
store, run, factor = sys.argv[2], sys.argv[3], float(sys.argv[4])
cpu = (int(sys.argv[6]) - int(sys.argv[5])) / int(sys.argv[7])
s = {x["name"]: x for x in d["drills"][0]["streams"]}
b, h, c = s["hot, before"], s["hot, during"], s["cold hosts"]
codes = c.get("codes", {})
r = h["p99_ms"] / max(b["p99_ms"], 1e-9)
print(f"| {store} | {run} | {b['p50_ms']:.1f} / {b['p99_ms']:.1f} | {h['p50_ms']:.1f} / {h['p99_ms']:.1f} | {h.get('max_ms', 0):.1f} | "
      f"{h['ok']} of {h['sent']} | {codes.get('200', 0)} / {codes.get('503', 0)} | {cpu:.2f} | {r:.2f}x{'' if r <= factor else ' **over**'} |")
PY
    tail -1 "$body" >&2
    grep -q '\*\*over\*\*' <(tail -1 "$body") || within=$((within + 1))
    kill -TERM "$lpid"
    wait "$lpid" 2>/dev/null || true # the instance lock is free once it has exited
    PIDS=("${PIDS[@]/$lpid}")
  done
  verdicts+=("$store: $within of $RUNS runs within ${FACTOR}x")
done
{
  echo
  for v in "${verdicts[@]}"; do echo "- $v"; done
} >>"$body"
cat "$body"
[[ $WRITE == 1 ]] && write_doc_section "$body" '^## Catalog'
exit 0
