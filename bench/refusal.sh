#!/usr/bin/env bash
# bench/refusal.sh — what one refusal costs: CPU and system calls per 429, levee beside nginx and
# haproxy refusing the same way, and three floors: fasthttp refusing with levee's settings and none
# of its steps (bench/bareproxy -refuse), levee's event loop doing the same (internal/h1loop,
# bench/bareproxy -refuse -loop), and an epoll loop in Go with nothing else (bench/refusalfloor).
#
# Usage:  bash bench/refusal.sh [--write]
#   --write   also replace the "refusal.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   CONNS [64 1024]   client connections per point   DURATION [4s] per run, after a 1 s warm-up
#   ROUNDS [3]        interleaved rounds (medians)   BACKEND_PORT [9131]  PORT_BASE [18380]
#   PIN [auto]        "0" disables taskset: the proxy alone on CPU 0, wrk on CPU 1
#
# Under overload refusals are most of the traffic (issue 19 point 4), and on a core shared with
# the backend their CPU is the backend's. Every target refuses every request past the first with
# 429: levee `limits: {rate: 1/s}` (default burst), nginx `limit_req rate=1r/s` with
# `limit_req_status 429`, haproxy a stick table's http_req_rate over 1 s with `deny_status 429`.
# wrk -t1 keeps each connection busy; CPU per refusal is the target's utime+stime from /proc over
# the run ÷ its answers, system calls per refusal `perf stat -e raw_syscalls:sys_enter` where perf
# works. The floors answer without a backend; the proxies have one (bench/backend) for their first
# request. Runtime: 6 targets × 2 points × 3 rounds × ~6 s ≈ 4 min.
set -euo pipefail

BENCH_NAME=refusal.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 20 "$@"

CONNS_LIST=${CONNS:-64 1024}
DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
BACKEND_PORT=${BACKEND_PORT:-9131}
PORT_BASE=${PORT_BASE:-18380}
NGINX_PORT=$PORT_BASE HAPROXY_PORT=$((PORT_BASE + 1)) LEVEE_PORT=$((PORT_BASE + 2))
BARE_PORT=$((PORT_BASE + 3)) FLOOR_PORT=$((PORT_BASE + 4)) LOOP_PORT=$((PORT_BASE + 5))
LEVEE_ADMIN_PORT=$((PORT_BASE + 12))

bench_init levee-refusal
bench_need_tools wrk nginx haproxy curl
bench_pinning "proxy on CPU $PROXY_CPU alone; backend + wrk on CPU $LOAD_CPU"
check_ports "refusal bench (set PORT_BASE)" "$BACKEND_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$LEVEE_PORT" \
  "$BARE_PORT" "$FLOOR_PORT" "$LOOP_PORT" "$LEVEE_ADMIN_PORT"

log "building bench/backend, bench/bareproxy and bench/refusalfloor"
build_bench backend
build_bench bareproxy
build_bench refusalfloor
GOMAXPROCS=1 "${ON_BACKEND_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || die "backend not ready"

TARGETS=()
declare -A URL PID HOSTHDR NOTE

# wait_429 URL SECONDS [curl args...] — poll until an answer of 429
wait_429() {
  local url=$1 secs=$2 deadline code; shift 2
  deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$@" "$url" 2>/dev/null || true)
    [[ $code == 429 ]] && return 0
    sleep 0.2
  done
  return 1
}

# add_target NAME PORT [HOST] — NAME refuses at PORT (PID[NAME] set): a target, or a NOTE
add_target() {
  local name=$1 port=$2 host=${3:-}
  local -a hdr=()
  [[ -n $host ]] && hdr=(-H "Host: $host")
  if wait_429 "http://127.0.0.1:$port/" 10 "${hdr[@]}"; then
    TARGETS+=("$name"); URL[$name]="http://127.0.0.1:$port/"; HOSTHDR[$name]=$host
  else
    log "$name does not refuse (no 429 within 10 s)"; NOTE[$name]="skipped: no 429"
  fi
}

start_levee "      rate: 1/s"
if [[ -n ${URL[levee]:-} ]]; then
  unset 'URL[levee]'
  add_target levee "$LEVEE_PORT" bench.local
fi

mkdir -p "$tmp/nginx/logs"
{
  nginx_conf_head crit 8192 "worker_rlimit_nofile 20000;"
  cat <<EOF
  limit_req_zone \$server_port zone=refusal:1m rate=1r/s;
  upstream bench_backend { server 127.0.0.1:$BACKEND_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    limit_req zone=refusal;
    limit_req_status 429;
    limit_req_log_level info;
    location / { proxy_pass http://bench_backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOF
} >"$tmp/nginx.conf"
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)
if nginx_check; then
  nginx_start; PID[nginx]=${PIDS[-1]}
  add_target nginx "$NGINX_PORT"
else
  log "nginx config test failed:"; cat "$tmp/nginx-t.log" >&2; NOTE[nginx]="skipped: config error"
fi

HAPROXY_BIN=$(command -v haproxy || echo /usr/sbin/haproxy)
{
  haproxy_cfg_head
  cat <<EOF
frontend fe_bench
  bind 127.0.0.1:$HAPROXY_PORT
  stick-table type integer size 1 expire 10s store http_req_rate(1s)
  http-request track-sc0 int(1)
  http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1 }
  default_backend be_bench
backend be_bench
  server b1 127.0.0.1:$BACKEND_PORT
EOF
} >"$tmp/haproxy.cfg"
if haproxy_check; then
  haproxy_start; PID[haproxy]=${PIDS[-1]}
  add_target haproxy "$HAPROXY_PORT"
else
  log "haproxy config check failed:"; cat "$tmp/haproxy-c.log" >&2; NOTE[haproxy]="skipped: config error"
fi

GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/bareproxy" -refuse -listen "127.0.0.1:$BARE_PORT" >"$tmp/bare.log" 2>&1 &
PID[fasthttp-bare]=$!; PIDS+=($!)
add_target fasthttp-bare "$BARE_PORT"
GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/bareproxy" -refuse -loop -listen "127.0.0.1:$LOOP_PORT" >"$tmp/loop.log" 2>&1 &
PID[h1loop-bare]=$!; PIDS+=($!)
add_target h1loop-bare "$LOOP_PORT"
GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/refusalfloor" -listen "127.0.0.1:$FLOOR_PORT" >"$tmp/floor.log" 2>&1 &
PID[epoll-floor]=$!; PIDS+=($!)
add_target epoll-floor "$FLOOR_PORT"

[[ " ${TARGETS[*]} " == *" levee "* ]] || log "levee did not start: ${NOTE[levee]:-}"

# nginx and haproxy count the worker (a child of nginx's master); cpu_ticks sums the tree
PERF=0
if command -v perf >/dev/null 2>&1 && perf stat -x, -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then PERF=1; fi

# measure TARGET — one run: "answers cpu_us_per_answer syscalls_per_answer" (syscalls "nan" without perf)
measure() {
  local t=$1 c0 c1 n pid syscalls=nan out="$tmp/wrk-$1.out"
  run_wrk "$t" 1s "$tmp/warm.out" || return 1
  pid=${PID[$t]}
  [[ $t == nginx ]] && pid=$(pgrep -P "${PID[nginx]}" | head -1)
  c0=$(cpu_ticks "$pid")
  if ((PERF)); then
    perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -o "$tmp/perf.out" -- sleep "$(to_secs "$DURATION")" &
    local perf_pid=$!
  fi
  run_wrk "$t" "$DURATION" "$out" || return 1
  ((PERF)) && wait "$perf_pid" 2>/dev/null
  c1=$(cpu_ticks "$pid")
  n=$(awk '/requests in/{print $1}' "$out")
  ((PERF)) && syscalls=$(awk -F, -v n="$n" '/raw_syscalls/{ if (n > 0) printf "%.2f", $1/n }' "$tmp/perf.out")
  awk -v n="$n" -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v s="${syscalls:-nan}" \
    'BEGIN{ if (n > 0) printf "%d %.2f %s\n", n, t*1e6/hz/n, s; else print "0 nan nan" }'
}

declare -A ANS CPU SYS
for CONNS in $CONNS_LIST; do
  for round in $(seq 1 "$ROUNDS"); do
    for t in "${TARGETS[@]}"; do
      read -r n cpu sys < <(measure "$t" || echo "0 nan nan")
      log "conns $CONNS round $round $t: $n answers, $cpu µs CPU and $sys system calls each"
      ANS[$t,$CONNS]+=" $(awk -v n="$n" -v d="$(to_secs "$DURATION")" 'BEGIN{printf "%.0f", n/d}')"
      CPU[$t,$CONNS]+=" $cpu"; SYS[$t,$CONNS]+=" $sys"
    done
  done
done

bench_versions
body="$tmp/body.md"
{
  echo "## What a refusal costs (bench/refusal.sh)"
  echo
  echo "- command: \`${LEVEE_SERVER:+LEVEE_SERVER='$LEVEE_SERVER' }bash bench/refusal.sh\`; $DATE; ${CPU_MODEL:-unknown CPU}; levee ${LEVEE_REV:-?} ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER"
  echo "- every request past the first answered 429 (levee \`rate: 1/s\`, nginx \`limit_req\`, haproxy a stick table); wrk -t1, $DURATION per run, medians of $ROUNDS interleaved rounds; pinning: $PIN_DESC"
  echo "- floors: \`fasthttp-bare\` is bench/bareproxy -refuse (fasthttp with levee's timeouts and read buffer, none of its steps), \`h1loop-bare\` bench/bareproxy -refuse -loop (levee's event loop, internal/h1loop, none of its steps), \`epoll-floor\` bench/refusalfloor (one Go goroutine on an epoll loop, nothing per connection)"
  echo
  echo "| conns | target | 429s/s | CPU µs per 429 | ÷ nginx | system calls per 429 |"
  echo "|---:|---|---:|---:|---:|---:|"
  for CONNS in $CONNS_LIST; do
    ngx=$(med "${CPU[nginx,$CONNS]:-}")
    for t in "${TARGETS[@]}"; do
      cpu=$(med "${CPU[$t,$CONNS]}")
      echo "| $CONNS | $t | $(fmt "$(med "${ANS[$t,$CONNS]}")" 0) | $(fmt "$cpu" 1) | $(ratio "$cpu" "$ngx") | $(fmt "$(med "${SYS[$t,$CONNS]}")" 2) |"
    done
  done
  for t in levee nginx haproxy fasthttp-bare h1loop-bare epoll-floor; do
    [[ -n ${NOTE[$t]:-} ]] && echo "- $t: ${NOTE[$t]}"
  done
  echo
  echo "Compare within a run: the host's speed moves between runs."
} >"$body"
cat "$body"
if [[ $WRITE == 1 ]]; then
  if [[ " ${TARGETS[*]} " == *" levee "* ]]; then write_doc_section "$body" '^## Every operating point'
  else log "not writing docs/benchmarks.md: levee did not run"; fi
fi
