#!/usr/bin/env bash
# bench/steps.sh — the CPU and allocations of each step of levee's request path, one Go benchmark
# per step (no network), beside a whole proxied request over loopback and every refusal.
#
# Usage:  bash bench/steps.sh [--write]
#   --write   also replace the "steps.sh" section of docs/benchmarks.md
# Environment: BENCHTIME [1s] per benchmark.
# Runtime: ~1 min. Nothing listens except BenchmarkProxyLoopback's loopback proxy and backend.
set -euo pipefail

BENCH_NAME=steps.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 10 "$@"
BENCHTIME=${BENCHTIME:-1s}
bench_init levee-steps

# step | package | benchmark regex (anchored)
STEPS=(
  "route: host and path → app|./internal/catalog|BenchmarkLookup"
  "shape: target and headers|./internal/shape|BenchmarkCheckTarget|BenchmarkCheckHeaders"
  "rate: app and client GCRA|./internal/server|BenchmarkLimitRateScaled"
  "admit: concurrency slot|./internal/admit|BenchmarkAcquireRelease"
  "protect: backend_limits|./internal/protect|BenchmarkGuardEnter"
  "balance: p2c pick and done|./internal/balance|BenchmarkP2CPickDone"
  "forward: request line and headers|./internal/forward|BenchmarkCopyRequest"
  "topk: top clients|./internal/topk|BenchmarkSketchAddTracked"
  "refusal, per reason (whole handler)|./internal/server|BenchmarkRefusal"
  "whole request over loopback (client + levee + backend)|./internal/server|BenchmarkProxyLoopback"
)

table="$tmp/table.md"
{
  echo "| step | benchmark | ns/op | B/op | allocs/op |"
  echo "|---|---|---:|---:|---:|"
  for s in "${STEPS[@]}"; do
    IFS='|' read -r -a f <<<"$s"
    label=${f[0]}; pkg=${f[1]}; names=("${f[@]:2}")
    re="^($(IFS='|'; echo "${names[*]}"))\$"
    log "$label: go test -bench '$re' $pkg"
    go test -run '^$' -bench "$re" -benchmem -benchtime "$BENCHTIME" -count 1 "$pkg" 2>/dev/null |
      awk -v label="$label" '/^Benchmark/ && /ns\/op/ {
        name=$1; sub(/-[0-9]+$/, "", name)
        ns=""; bop=""; al=""
        for (i=2; i<=NF; i++) { if ($(i)=="ns/op") ns=$(i-1); if ($(i)=="B/op") bop=$(i-1); if ($(i)=="allocs/op") al=$(i-1) }
        printf "| %s | `%s` | %s | %s | %s |\n", label, name, ns, bop, al; label="" }'
  done
} >"$table"

bench_versions
CMD="BENCHTIME=$BENCHTIME bash bench/steps.sh"
((WRITE)) && CMD+=" --write"
{
  echo "Request path steps — go test -bench, $BENCHTIME each, $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, levee $(git -C "$ROOT" rev-parse --short HEAD) ($GO_VER)"
  echo
  cat "$table"
}
if ((WRITE)); then
  {
    echo "## The request path, step by step (bench/steps.sh)"
    echo
    echo "- command: \`$CMD\`"
    echo "- date: $DATE"
    echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr); levee $(git -C "$ROOT" rev-parse --short HEAD) ($GO_VER)"
    echo
    cat "$table"
    echo
    echo "Each step's own benchmark, in-process, no network (but the last row: client, levee and a backend over loopback in one process, so its ns/op and allocations are the three together). A refusal is the whole HTTP/1.1 handler for a request refused for that reason: it allocates nothing."
  } >"$tmp/section-body.md"
  write_doc_section "$tmp/section-body.md"
fi
