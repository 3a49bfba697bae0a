#!/usr/bin/env bash
# bench/proxy.sh — plain reverse-proxy throughput/latency: direct vs levee vs nginx vs haproxy.
#
# Usage:  bash bench/proxy.sh [--write]
#   --write   also replace the "proxy.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   DURATION [10s]  wrk run length per round     WARMUP [2s]  one warm-up run per target
#   ROUNDS   [3]    timed rounds per target      CONNS  [64]  wrk connections (one wrk thread)
#   BACKEND_PORT [9101]                           PIN [auto]  "0" disables taskset pinning
#   PIN_MODE [alone]  alone: the proxy alone on CPU 0, backend + wrk on CPU 1; shared: the proxy
#                     and the backend share CPU 0 (an edge box, a sidecar), wrk alone on CPU 1
#
# What runs (all on 127.0.0.1, all started here as foreground children, all stopped by the trap):
#   backend  bench/backend, GOMAXPROCS=1                          127.0.0.1:$BACKEND_PORT
#   nginx    worker_processes 1, upstream keepalive max(64, CONNS), HTTP/1.1  127.0.0.1:18080
#   haproxy  nbthread 1, http-reuse always, http-keep-alive       127.0.0.1:18081
#   levee    GOMAXPROCS=1, a config as a new user writes it: one plain listener (HTTP/1.1 on
#            the event loops), default limits (skipped, with a message, if it does not build or get ready)
#                                                                 127.0.0.1:18082, admin :18092
#   fasthttp-bare  bench/bareproxy, GOMAXPROCS=1: fasthttp's own proxy idiom, none of levee's
#            steps: the floor of levee's path; levee ÷ it is levee's own share  127.0.0.1:18084
#   epoll-forward  bench/forwardfloor: one goroutine on one epoll loop holding the clients' and
#            the backend connections' sockets, none of levee's steps: the floor of a request
#            forwarded from an event loop, with no goroutine woken per request  127.0.0.1:18086
# Fairness: every proxy gets ONE worker thread, keep-alive to the backend, no access log, and
# client-side keep-alive without a per-connection request cap (nginx keepalive_requests raised).
# CPU pinning (when taskset exists and nproc >= 2), PIN_MODE=alone: every proxy on CPU 0; backend
# AND wrk share CPU 1. The "direct" row is therefore wrk -> backend both on CPU 1, with CPU 0 idle. A proxy row
# adds a hop running on its own core, so "req/s vs direct" < 1 means the single proxy thread (or
# the extra hop's latency at c=64) is the bottleneck.
# Rounds are interleaved (round 1: all targets, round 2: all targets, ...) so drift on the
# machine hits every target alike; the table shows per-target medians over ROUNDS.
# "proxy CPU" = (utime+stime of the proxy process tree over the timed run) / requests served,
# from /proc/PID/stat (10 ms tick resolution; fine at ~10^5 requests per round).
# Runtime at defaults: 5 x 2 s warm-up + 3 x 5 x 10 s = ~3 min, plus builds (< 5 min total).
set -euo pipefail

BENCH_NAME=proxy.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 28 "$@"

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
BACKEND_PORT=${BACKEND_PORT:-9101}
NGINX_PORT=18080
HAPROXY_PORT=18081
LEVEE_PORT=18082
BARE_PORT=18084
FLOOR_PORT=18086
LEVEE_ADMIN_PORT=18092

bench_init levee-bench
bench_need_tools wrk nginx haproxy curl
bench_pinning "proxies on CPU $PROXY_CPU, backend + wrk on CPU $LOAD_CPU"

# ---------------------------------------------------------------- helpers
# rounds "LIST" — the per-round values, rounded, " / "-separated
rounds() { awk -v l="$1" 'BEGIN{ n=split(l,a," "); for(i=1;i<=n;i++) printf "%s%.0f", (i>1?" / ":""), a[i]; print "" }'; }

# ---------------------------------------------------------------- ports
check_ports backend "$BACKEND_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$LEVEE_PORT" "$BARE_PORT" "$FLOOR_PORT" "$LEVEE_ADMIN_PORT"

# ---------------------------------------------------------------- backend
log "building bench/backend"
build_bench backend
GOMAXPROCS=1 "${ON_BACKEND_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
BACKEND_PID=$!; PIDS+=("$BACKEND_PID")
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || { cat "$tmp/backend.log" >&2; die "backend not ready"; }

TARGETS=(direct)
declare -A URL PID HOSTHDR NOTE
URL[direct]="http://127.0.0.1:$BACKEND_PORT/"; PID[direct]=""; HOSTHDR[direct]=""

# ---------------------------------------------------------------- levee
start_levee ""  # default limits: a config as a new user writes it

# ---------------------------------------------------------------- bare fasthttp
# The floor of levee's HTTP/1.1 path: fasthttp's own proxy idiom with none of levee's steps.
build_bench bareproxy
GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/bareproxy" -listen "127.0.0.1:$BARE_PORT" -backend "127.0.0.1:$BACKEND_PORT" >"$tmp/bare.log" 2>&1 &
PID[fasthttp-bare]=$!; PIDS+=("${PID[fasthttp-bare]}")
if wait_http "http://127.0.0.1:$BARE_PORT/" 10; then
  URL[fasthttp-bare]="http://127.0.0.1:$BARE_PORT/"; HOSTHDR[fasthttp-bare]=""
else
  NOTE[fasthttp-bare]="skipped: not ready"
fi

# ---------------------------------------------------------------- epoll forward floor
# The floor of a request forwarded from an event loop (what issue 19's structural step aims at):
# the backend's sockets in the clients' loop, nothing woken or parked per request.
build_bench forwardfloor
GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/forwardfloor" -listen "127.0.0.1:$FLOOR_PORT" -backend "127.0.0.1:$BACKEND_PORT" >"$tmp/floor.log" 2>&1 &
PID[epoll-forward]=$!; PIDS+=("${PID[epoll-forward]}")
if wait_http "http://127.0.0.1:$FLOOR_PORT/" 10; then
  URL[epoll-forward]="http://127.0.0.1:$FLOOR_PORT/"; HOSTHDR[epoll-forward]=""
else
  NOTE[epoll-forward]="skipped: not ready"
fi

# ---------------------------------------------------------------- nginx
NGINX_BIN=$(command -v nginx)
mkdir -p "$tmp/nginx/logs"
{
  nginx_conf_head warn 4096
  # As many idle backend connections as wrk can have requests in flight: with fewer, nginx closes
  # and dials connections all run (each a TIME_WAIT), and the row measures that, not nginx.
  nginx_proxy_block "$(( CONNS > 64 ? CONNS : 64 ))" "$NGINX_PORT"
} >"$tmp/nginx.conf"
start_nginx_target

# ---------------------------------------------------------------- haproxy
HAPROXY_BIN=$(command -v haproxy)
write_haproxy_single "" ""
start_haproxy_target

[[ -n ${URL[levee]:-} ]] && TARGETS+=(levee)
[[ -n ${URL[fasthttp-bare]:-} ]] && TARGETS+=(fasthttp-bare)
[[ -n ${URL[epoll-forward]:-} ]] && TARGETS+=(epoll-forward)

# ---------------------------------------------------------------- load
# parse_wrk FILE -> "rps p50_ms p99_ms requests errors"
parse_wrk() {
  awk '
    function ms(v,   n,u){ n=v+0; u=v; sub(/^[0-9.]+/,"",u)
      if(u=="us") return n/1000; if(u=="ms") return n; if(u=="s") return n*1000
      if(u=="m") return n*60000; if(u=="h") return n*3600000; return n }
    /^Requests\/sec:/            { rps=$2 }
    / requests in /              { reqs=$1 }
    /^ +50%/                     { p50=ms($2) }
    /^ +99%/                     { p99=ms($2) }
    /Non-2xx or 3xx responses:/  { err+=$NF }
    /Socket errors:/             { for(i=1;i<=NF;i++) if($i ~ /^[0-9]+,?$/) { v=$i; sub(/,/,"",v); err+=v } }
    END { printf "%s %s %s %s %d\n", rps+0, p50+0, p99+0, reqs+0, err }' "$1"
}

declare -A RPS P50 P99 CPU ERR
log "warm-up: $WARMUP per target (${TARGETS[*]})"
for t in "${TARGETS[@]}"; do run_wrk "$t" "$WARMUP" "$tmp/warmup-$t.txt" --latency || true; done

CLK_TCK=$(getconf CLK_TCK)
for ((r=1; r<=ROUNDS; r++)); do
  for t in "${TARGETS[@]}"; do
    out="$tmp/wrk-$t-$r.txt"
    c0=0; [[ -n ${PID[$t]:-} ]] && c0=$(cpu_ticks "${PID[$t]}")
    if ! run_wrk "$t" "$DURATION" "$out" --latency; then continue; fi
    c1=0; [[ -n ${PID[$t]:-} ]] && c1=$(cpu_ticks "${PID[$t]}")
    read -r rps p50 p99 reqs errs < <(parse_wrk "$out")
    RPS[$t]+="$rps "; P50[$t]+="$p50 "; P99[$t]+="$p99 "; ERR[$t]=$(( ${ERR[$t]:-0} + errs ))
    if [[ -n ${PID[$t]:-} ]] && ((reqs > 0)); then
      CPU[$t]+="$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN{printf "%.2f", d/hz*1e6/n}') "
    fi
    log "round $r/$ROUNDS $t: $rps req/s, p50 ${p50} ms, p99 ${p99} ms, errors $errs"
  done
done

# ---------------------------------------------------------------- table
d_rps=$(med "${RPS[direct]:-}"); d_p50=$(med "${P50[direct]:-}"); d_p99=$(med "${P99[direct]:-}")

table="$tmp/table.md"
{
  echo "| target | req/s (median) | req/s vs direct | p50 ms | p50 vs direct | p99 ms | p99 vs direct | proxy CPU µs/req | errors | req/s per round |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
  for t in direct levee fasthttp-bare epoll-forward nginx haproxy; do
    if [[ -z ${RPS[$t]:-} ]]; then
      [[ $t == direct ]] && continue
      echo "| $t | ${NOTE[$t]:-skipped} | | | | | | | | |"; continue
    fi
    rps=$(med "${RPS[$t]}"); p50=$(med "${P50[$t]}"); p99=$(med "${P99[$t]}")
    cpu="—"; [[ -n ${CPU[$t]:-} ]] && cpu=$(fmt "$(med "${CPU[$t]}")" 1)
    echo "| $t | $(fmt "$rps" 0) | $(ratio "$rps" "$d_rps") | $(fmt "$p50" 3) | $(ratio "$p50" "$d_p50") | $(fmt "$p99" 3) | $(ratio "$p99" "$d_p99") | $cpu | ${ERR[$t]:-0} | $(rounds "${RPS[$t]}") |"
  done
  echo
  PEER_EXTRA="fasthttp-bare epoll-forward" peer_ratios "req/s" RPS "p99" P99 "CPU per request" CPU
} >"$table"

bench_versions
CMD="PIN_MODE=$PIN_MODE DURATION=$DURATION ROUNDS=$ROUNDS bash bench/proxy.sh"
[[ $PIN_MODE == shared ]] && DOC_SECTION=proxy.sh-shared
((WRITE)) && CMD+=" --write"

{
  echo "Plain proxy benchmark — wrk -t1 -c$CONNS -d$DURATION, $ROUNDS interleaved rounds (median), 100-byte responses"
  echo "machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}; pinning: $PIN_DESC"
  echo "versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER"
  echo
  cat "$table"
}

# ---------------------------------------------------------------- --write
if ((WRITE)); then
  if [[ -z ${RPS[levee]:-} ]]; then
    log "--write: levee did not run, docs/benchmarks.md left unchanged"
  else
    {
      echo "## Plain proxy throughput and latency (bench/proxy.sh, PIN_MODE=$PIN_MODE)"
      echo
      echo "- command: \`$CMD\`"
      echo "- date: $DATE"
      echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr)"
      echo "- load: wrk -t1 -c$CONNS -d$DURATION --latency, $WARMUP warm-up per target, $ROUNDS interleaved rounds, medians shown; backend answers 100 bytes"
      echo "- setup: one worker thread per proxy (levee GOMAXPROCS=1, nginx worker_processes 1, haproxy nbthread 1), keep-alive to the backend, no access logs; pinning: $PIN_DESC; backend GOMAXPROCS=1"
      echo "- versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER"
      echo
      cat "$table"
      echo
      echo "Ratios are against \`direct\` (wrk straight to the backend): req/s ratio higher is better, latency ratios lower is better. Proxy CPU is the proxy's utime+stime per request."
    } >"$tmp/section-body.md"
    write_doc_section "$tmp/section-body.md"
  fi
fi
