#!/usr/bin/env bash
# bench/catalog.sh — the SQLite catalog at a million apps: cached lookups, updates, cold loads.
#
# Usage:  bash bench/catalog.sh [--write]
#   --write   also replace the "catalog.sh" section of docs/benchmarks.md
# Environment (defaults in brackets):
#   APPS   [1000000]  apps in the generated catalog file
#   CACHED [100000]   of them cached (catalog.cache.max_apps) for the lookup benchmark
#   COUNT  [3]        runs of each benchmark; the table shows medians
#   BENCHTIME [2s]    go test -benchtime per run
#
# It runs the Go benchmarks of internal/catalog/sqlitestore (bench_test.go), which generate the
# catalog file in a temporary directory (plain inserts in one transaction, ~1 min at 1M apps on
# these machines), cache CACHED hosts, and measure:
#   - a cached lookup (ns/op and allocs, all Ps at once), with no change and with 1,000 changed
#     apps a second applied by the watcher (each a new config read, composed and swapped in);
#   - the heap per cached app: the cache's own cost (node, entry, app record with its config),
#     and a levee app's composed state with default limits (internal/server BenchmarkStoredAppMemory);
#   - a cold load: one host never loaded before, read from the file (one indexed statement);
#   - the p50/p99 of a hot-set lookup, alone and beside a stream of cold hosts.
# Nothing listens on a port; the only process is `go test`. Runtime at defaults: ~3-5 min.
set -euo pipefail

BENCH_NAME=catalog.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 21 "$@"
bench_init levee-catalog-bench

APPS=${APPS:-1000000}
CACHED=${CACHED:-100000}
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-2s}

LOAD=$(cut -d' ' -f1 /proc/loadavg)
log "go test -bench at APPS=$APPS CACHED=$CACHED COUNT=$COUNT BENCHTIME=$BENCHTIME"
LEVEE_BENCH_APPS=$APPS LEVEE_BENCH_CACHED=$CACHED \
  go test ./internal/catalog/sqlitestore -run '^$' -bench 'Catalog' -benchtime "$BENCHTIME" \
  -count "$COUNT" -timeout 60m | tee "$tmp/bench.txt" >&2

log "go test -bench StoredAppMemory (internal/server)"
go test ./internal/server -run '^$' -bench 'StoredAppMemory' -count "$COUNT" | tee -a "$tmp/bench.txt" >&2

# field VALUE_UNIT LINE_FILTER: the medians of the column before unit $1 on lines matching $2
col() {
  local unit=$1 filter=$2
  median $(awk -v u="$unit" -v f="$filter" '$0 ~ f { for (i = 2; i <= NF; i++) if ($i == u) print $(i-1) }' "$tmp/bench.txt")
}
up0="CachedLookup/.*/updates=0-"
up1="CachedLookup/.*/updates=1000-"
cold="ColdLoad/"
hot0="HotWithColdStream/.*cold-stream=false"
hot1="HotWithColdStream/.*cold-stream=true"

body="$tmp/body.md"
{
  echo "## The SQLite catalog at $APPS apps (bench/catalog.sh)"
  echo
  echo "\`bash bench/catalog.sh\` ($(date -u +%Y-%m-%d), $(nproc) CPUs, $(go env GOVERSION), load average $LOAD at the start): $APPS apps in the"
  echo "file, $CACHED of them cached; medians of $COUNT runs of -benchtime $BENCHTIME. Lookups run on"
  echo "every P at once (ns/op is wall time per lookup across them)."
  echo
  echo "| measure | value |"
  echo "|---|---|"
  echo "| cached lookup, no changes | $(fmt "$(col ns/op "$up0")" 0) ns/op, $(fmt "$(col allocs/op "$up0")" 0) allocs |"
  echo "| cached lookup, 1,000 changes/s applied | $(fmt "$(col ns/op "$up1")" 0) ns/op, $(fmt "$(col allocs/op "$up1")" 0) allocs ($(fmt "$(col applied/s "$up1")" 0) applied/s) |"
  echo "| heap per cached app (cache only) | $(fmt "$(col heapB/cached-app "$up0")" 0) B |"
  echo "| heap per cached app composed by the server (defaults) | $(fmt "$(col heapB/stored-app StoredAppMemory)" 0) B |"
  echo "| cold load (one host from the file) | $(fmt "$(col ns/op "$cold")" 0) ns/op, $(fmt "$(col allocs/op "$cold")" 0) allocs |"
  echo "| hot lookup p50 / p99, alone | $(fmt "$(col p50-ns "$hot0")" 0) / $(fmt "$(col p99-ns "$hot0")" 0) ns |"
  echo "| hot lookup p50 / p99, beside a cold stream | $(fmt "$(col p50-ns "$hot1")" 0) / $(fmt "$(col p99-ns "$hot1")" 0) ns ($(fmt "$(col cold/s "$hot1")" 0) cold lookups/s, $(fmt "$(col cold-shed-ratio "$hot1")" 2) of them refused catalog-busy) |"
  echo
  echo "A cached lookup of a random one of $CACHED hosts is bound by memory: its ~6 dependent reads"
  echo "(shard, map slot, key, node, app, route) each miss the CPU caches, as the cache's working set"
  echo "is CACHED x the heap per app. The hot rows are the common case, a hot set that stays in cache."
  echo "The hot p50/p99 time one lookup of 1,000 cached hosts (timer included), alone and with 8"
  echo "goroutines loading random cold hosts beside it (loader: 4 queries, 16 waiters; a refused one"
  echo "backs off 1 ms). This is in-process: an end-to-end HTTP run through levee is not measured yet."
} >"$body"
cat "$body"
[[ $WRITE == 1 ]] && write_doc_section "$body"
exit 0
