#!/usr/bin/env bash
# bench/cluster.sh — cluster mode: three levee instances sharing one rate limit through one
# redis-server, under open-loop load at 5x the limit spread unevenly over the three.
#
# Usage:  bash bench/cluster.sh [--write]
#   --write   also replace the "cluster.sh" section of docs/benchmarks.md
# Environment (defaults in brackets):
#   LIMIT [1000]     the app's limits.rate, req/s (burst: its default, a tenth of it)
#   DURATION [10s]   each loadgen run          CONNS [64]  loadgen connections per instance
#   SHARES [5 3 2]   offered load per instance, tenths of the total (5x LIMIT): 2.5x, 1.5x, 1x
#   DECISIONS [2000000]  decisions timed by the in-process benchmark (BenchmarkDecision)
#   BACKEND_PORT [9131]  REDIS_PORT [18379]
#
# What runs (all on 127.0.0.1, all started here, all stopped by the trap):
#   redis-server  --port REDIS_PORT, no persistence
#   backend       bench/backend, GOMAXPROCS=1
#   levee         GOMAXPROCS=1 each, listen 18382..18384, admin 18392..18394, app bench with
#                 limits.rate LIMIT; three runs: "one" (a single instance, all the load: the
#                 reference), "local" (three, no cluster section: each enforces the whole limit
#                 alone) and "cluster" (three, cluster.redis.addrs: the Redis above)
#   loadgen x3    one per instance, open loop, rates SHARES/10 x 5 x LIMIT, all at once
# Columns:
#   admitted/s    200s summed over the three instances ÷ DURATION (includes one burst at start)
#   vs limit      admitted/s ÷ LIMIT: 1.00 is exact; "local" shows what three instances do alone
#   429 p99       p99 latency of a refused request (the limit decision plus HTTP on loopback),
#                 the worst of the three instances; cluster minus local is the added latency
#   redis trips/1000 req   levee_cluster_redis_calls_total summed ÷ requests sent × 1000
# Then BenchmarkDecision (internal/cluster): one decision timed in process, local vs three
# cluster stores on one redis-server (unix socket), p50/p99/p99.9 and round trips per 1,000
# decisions, and one lease taken from Redis (roundtrip: what a decision that must ask waits).
set -euo pipefail

BENCH_NAME=cluster.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 30 "$@"

LIMIT=${LIMIT:-1000}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
SHARES=${SHARES:-5 3 2}
DECISIONS=${DECISIONS:-2000000}
BACKEND_PORT=${BACKEND_PORT:-9131}
REDIS_PORT=${REDIS_PORT:-18379}
PORTS=(18382 18383 18384)
ADMINS=(18392 18393 18394)

bench_init levee-cluster
bench_need_tools curl redis-server
check_ports "bench (see BACKEND_PORT, REDIS_PORT)" "$BACKEND_PORT" "$REDIS_PORT" "${PORTS[@]}" "${ADMINS[@]}"

build_bench backend
build_bench loadgen
build_levee || die "levee does not build"

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
  --logfile "$tmp/redis.log" &
PIDS+=($!)
GOMAXPROCS=1 "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || die "backend not ready"

# start_levees MODE — MODE one (one instance), local or cluster (three); sets LEVEE_PIDS, N
start_levees() {
  local mode=$1 i cluster=""
  [[ $mode == cluster ]] && cluster="cluster: {redis: {addrs: [127.0.0.1:$REDIS_PORT]}}"
  N=3; [[ $mode == one ]] && N=1
  LEVEE_PIDS=()
  for ((i=0; i<N; i++)); do
    cat >"$tmp/levee-$i.yaml" <<YAML
listen: 127.0.0.1:${PORTS[i]}
admin: 127.0.0.1:${ADMINS[i]}
$cluster
apps:
  bench:
    hosts: [bench.local]
    backends: [127.0.0.1:$BACKEND_PORT]
    limits: {rate: $LIMIT/s}
YAML
    GOMAXPROCS=1 "$tmp/levee" serve --config "$tmp/levee-$i.yaml" >"$tmp/levee-$mode-$i.log" 2>&1 &
    LEVEE_PIDS+=($!); PIDS+=($!)
  done
  for ((i=0; i<N; i++)); do
    wait_http "http://127.0.0.1:${ADMINS[i]}/readyz" 10 || { tail "$tmp/levee-$mode-$i.log" >&2; die "levee $i ($mode) not ready"; }
  done
  sleep 1.5 # the readiness probes spent some burst; let the bucket refill
}

stop_levees() {
  local pid
  for pid in "${LEVEE_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${LEVEE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=("${PIDS[@]:0:2}") # redis and backend stay
}

# kv FILE KEY — a value from a loadgen -kv line
kv() { tr ' ' '\n' <"$1" | awk -F= -v k="$2" '$1==k{print substr($0, length(k)+2); exit}'; }

# metric_sum NAME — a metric summed over the N admin endpoints
metric_sum() {
  local i s=0 v
  for ((i=0; i<N; i++)); do
    v=$(curl -s -m 2 "http://127.0.0.1:${ADMINS[i]}/metrics" | awk -v n="$1" '$1==n{print $2}')
    s=$(awk -v a="$s" -v b="${v:-0}" 'BEGIN{print a+b}')
  done
  echo "$s"
}

# run_mode MODE — load, then one table row
run_mode() {
  local mode=$1 i share rate ok=0 sent=0 p99=0 trips0 trips1
  start_levees "$mode"
  trips0=$(metric_sum levee_cluster_redis_calls_total)
  local shares=$SHARES
  [[ $mode == one ]] && shares=10
  i=0
  for share in $shares; do
    rate=$(awk -v l="$LIMIT" -v s="$share" 'BEGIN{print l*5*s/10}')
    timeout -k 5 $(( $(to_secs "$DURATION") + 30 )) "$tmp/loadgen" -url "http://127.0.0.1:${PORTS[i]}/" -host bench.local \
      -rate "$rate" -duration "$DURATION" -conns "$CONNS" -timeout 1s -q -kv "$tmp/$mode-$i.kv" >/dev/null 2>"$tmp/$mode-$i.err" &
    LG[i]=$!
    i=$((i+1))
  done
  for ((i=0; i<N; i++)); do wait "${LG[i]}" || { cat "$tmp/$mode-$i.err" >&2; die "loadgen $i failed"; }; done
  trips1=$(metric_sum levee_cluster_redis_calls_total)
  local errs degr
  errs=$(metric_sum levee_cluster_redis_errors_total)
  degr=$(cat "$tmp"/levee-"$mode"-*.log | grep -c "redis unreachable" || true)
  [[ $mode == cluster ]] && log "cluster: $errs Redis calls failed or timed out; $degr degraded episodes"
  for ((i=0; i<N; i++)); do
    ok=$((ok + $(kv "$tmp/$mode-$i.kv" ok)))
    sent=$((sent + $(kv "$tmp/$mode-$i.kv" sent)))
    p99=$(awk -v a="$p99" -v b="$(kv "$tmp/$mode-$i.kv" rej_p99_ms)" 'BEGIN{print (b>a?b:a)}')
    log "$mode instance $i: $(kv "$tmp/$mode-$i.kv" ok) ok, $(kv "$tmp/$mode-$i.kv" rejected) refused of $(kv "$tmp/$mode-$i.kv" sent) sent"
  done
  stop_levees
  awk -v m="$mode" -v ok="$ok" -v sent="$sent" -v d="$(to_secs "$DURATION")" -v l="$LIMIT" -v p="$p99" \
      -v t="$(awk -v a="$trips0" -v b="$trips1" 'BEGIN{print b-a}')" 'BEGIN{
    printf "| %s | %.0f | %d | %.0f | %.3f | %.3f | %.2f | %s |\n", m, sent/d, l, ok/d, ok/d/l, ok/(l*d+int(l/10)), p, (m=="cluster" ? sprintf("%.1f", 1000*t/sent) : "—")
  }' >>"$tmp/rows.md"
}

: >"$tmp/rows.md"
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
run_mode one
run_mode local
run_mode cluster

log "BenchmarkDecision: $DECISIONS decisions each, local and cluster"
go test -run '^$' -bench Decision -benchtime "${DECISIONS}x" ./internal/cluster >"$tmp/decision.txt" 2>&1 \
  || { cat "$tmp/decision.txt" >&2; die "BenchmarkDecision failed"; }
decision_row() { # NAME
  awk -v n="BenchmarkDecision/$1" 'index($1, n)==1{
    for(i=1;i<=NF;i++){ if($i=="p50-ns")p50=$(i-1); if($i=="p99-ns")p99=$(i-1); if($i=="p999-ns")p999=$(i-1); if($i=="trips/1000")t=$(i-1) }
    printf "| %s | %s | %s | %s | %s |\n", substr(n, 19), p50, p99, p999, (t==""?"—":t) }' "$tmp/decision.txt"
}

DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
CPU_MODEL=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
REDIS_VER=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')
{
  echo "## Cluster mode: one limit over three instances (bench/cluster.sh)"
  echo
  echo "$DATE, levee ${LEVEE_REV:-?}, Go $(go env GOVERSION), redis-server $REDIS_VER, $(nproc) CPUs ($CPU_MODEL)."
  echo "Three levee instances (GOMAXPROCS=1 each) and one redis-server on loopback; app limit"
  echo "\`rate: $LIMIT/s\` (default burst $((LIMIT/10))); open-loop load of 5x the limit for $DURATION, split"
  echo "$(echo "$SHARES" | tr ' ' ':') over the instances. \`one\` is a single instance taking the whole load (the"
  echo "reference: what the limit means); \`local\` is three instances without \`cluster\`, each enforcing the"
  echo "whole limit alone. A run's requests reach levee over a little more than $DURATION (the generator"
  echo "sends late on a busy machine), so \`one\` can exceed burst + limit × duration slightly too."
  echo
  echo "| mode | offered req/s | limit req/s | admitted req/s | admitted ÷ limit | admitted ÷ (burst + limit × duration) | 429 p99 ms | Redis trips / 1,000 req |"
  echo "|---|---|---|---|---|---|---|---|"
  cat "$tmp/rows.md"
  echo
  echo "One decision in process (\`BenchmarkDecision\`, $DECISIONS decisions from concurrent goroutines,"
  echo "three cluster stores on one redis-server over a unix socket, limit 5000/s, far beyond it):"
  echo
  echo "| store | p50 ns | p99 ns | p99.9 ns | Redis trips / 1,000 decisions |"
  echo "|---|---|---|---|---|"
  decision_row local
  decision_row cluster
  decision_row roundtrip
  echo
  echo "Reading: \`cluster\` should admit what \`one\` does (the limit), while \`local\` admits it once per"
  echo "instance. Its Redis round trips are one lease per instance when the bucket refills, not one per"
  echo "request. A decision waits for Redis only when its instance holds no lease and the bucket is not"
  echo "known to be empty (\`roundtrip\` is what that wait costs: one lease taken over the unix socket);"
  echo "the rest decide in process, so the cluster store's p50/p99 match the local store's. The 429 p99 of"
  echo "the HTTP runs is mostly the machine: three levees, redis, the backend and three generators share"
  echo "$(nproc) CPUs (load average before the runs: $LOADAVG)."
} >"$tmp/section.body"
cat "$tmp/section.body"
if ((WRITE)); then write_doc_section "$tmp/section.body"; fi
