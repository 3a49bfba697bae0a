#!/usr/bin/env bash
# bench/proxy.sh — plain reverse-proxy throughput/latency: direct vs levee vs nginx vs haproxy.
#
# Usage:  bash bench/proxy.sh [--write]
#   --write   also replace the "proxy.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   DURATION [10s]  wrk run length per round     WARMUP [2s]  one warm-up run per target
#   ROUNDS   [3]    timed rounds per target      CONNS  [64]  wrk connections (one wrk thread)
#   BACKEND_PORT [9101]                           PIN [auto]  "0" disables taskset pinning
#
# What runs (all on 127.0.0.1, all started here as foreground children, all stopped by the trap):
#   backend  bench/backend, GOMAXPROCS=1                          127.0.0.1:$BACKEND_PORT
#   nginx    worker_processes 1, upstream keepalive 64, HTTP/1.1  127.0.0.1:18080
#   haproxy  nbthread 1, http-reuse always, http-keep-alive       127.0.0.1:18081
#   levee    GOMAXPROCS=1 (skipped, with a message, if it does not build or get ready)
#                                                                 127.0.0.1:18082, admin :18092
# Fairness: every proxy gets ONE worker thread, keep-alive to the backend, no access log, and
# client-side keep-alive without a per-connection request cap (nginx keepalive_requests raised).
# CPU pinning (when taskset exists and nproc >= 2): every proxy on CPU 0; backend AND wrk share
# CPU 1. The "direct" row is therefore wrk -> backend both on CPU 1, with CPU 0 idle. A proxy row
# adds a hop running on its own core, so "req/s vs direct" < 1 means the single proxy thread (or
# the extra hop's latency at c=64) is the bottleneck.
# Rounds are interleaved (round 1: all targets, round 2: all targets, ...) so drift on the
# machine hits every target alike; the table shows per-target medians over ROUNDS.
# "proxy CPU" = (utime+stime of the proxy process tree over the timed run) / requests served,
# from /proc/PID/stat (10 ms tick resolution; fine at ~10^5 requests per round).
# Runtime at defaults: 4 x 2 s warm-up + 3 x 4 x 10 s = ~2.5 min, plus builds (< 5 min total).
set -euo pipefail

WRITE=0
for arg in "$@"; do
  case "$arg" in
    --write) WRITE=1 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "proxy.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
BACKEND_PORT=${BACKEND_PORT:-9101}
NGINX_PORT=18080
HAPROXY_PORT=18081
LEVEE_PORT=18082
LEVEE_FAST_PORT=18083
LEVEE_ADMIN_PORT=18092
PROXY_CPU=0
LOAD_CPU=1

cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '[proxy.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- temp dir + cleanup
tmp=$(mktemp -d "${TMPDIR:-/tmp}/levee-bench.XXXXXX")
PIDS=()
WRK_PID=""
cleanup() {
  local rc=$? pid i
  trap - EXIT INT TERM
  [[ -n ${WRK_PID:-} ]] && kill -TERM "$WRK_PID" 2>/dev/null
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do
    pid=${PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- tools
need_pkgs=()
command -v wrk     >/dev/null 2>&1 || need_pkgs+=(wrk)
command -v nginx   >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]]   || need_pkgs+=(nginx)
command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]] || need_pkgs+=(haproxy)
command -v curl    >/dev/null 2>&1 || need_pkgs+=(curl)
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]} with apt-get (system services are not used)"
  SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  timeout 180 "${SUDO[@]}" apt-get update -qq >"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; die "apt-get update failed"; }
  timeout 300 "${SUDO[@]}" apt-get install -y -qq "${need_pkgs[@]}" >>"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; die "apt-get install failed"; }
fi
export PATH="$PATH:/usr/sbin:/sbin"
command -v go >/dev/null 2>&1 || die "go is not on PATH"

PINNED=0
if [[ ${PIN:-auto} != 0 ]] && command -v taskset >/dev/null 2>&1 && (( $(nproc) >= 2 )); then
  PINNED=1
fi
# Command prefixes, used as "${ON_PROXY_CPU[@]}" cmd & — a plain simple command, so bash execs it
# (and taskset execs cmd) and $! is cmd's own PID, which the trap kills and /proc/PID/stat measures.
ON_PROXY_CPU=(); ON_LOAD_CPU=()
if ((PINNED)); then ON_PROXY_CPU=(taskset -c "$PROXY_CPU"); ON_LOAD_CPU=(taskset -c "$LOAD_CPU"); fi
if ((PINNED)); then log "pinning: proxies on CPU $PROXY_CPU, backend + wrk on CPU $LOAD_CPU"
else log "pinning: off (taskset missing, PIN=0 or fewer than 2 CPUs)"; fi

# ---------------------------------------------------------------- helpers
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_http URL SECONDS [extra curl args...] — poll until HTTP 200
wait_http() {
  local url=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if [[ $(curl -s -o /dev/null -m 1 -w '%{http_code}' "$@" "$url" 2>/dev/null) == 200 ]]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# to_secs 10s|2m|500ms|7 -> whole seconds (rounded up), for timeouts
to_secs() {
  awk -v d="$1" 'BEGIN{ n=d+0; u=d; sub(/^[0-9.]+/,"",u)
    if(u=="ms") n/=1000; else if(u=="m") n*=60; else if(u=="h") n*=3600
    printf "%d\n", (n==int(n)) ? n : int(n)+1 }'
}

# cpu_ticks PID — utime+stime (clock ticks) of PID and all its descendants
cpu_ticks() {
  local total=0 p stat rest kids
  local -a queue=("$1")
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    if stat=$(cat "/proc/$p/stat" 2>/dev/null); then
      rest=${stat##*) }            # fields from 3 (state) on; comm may hold spaces
      read -r -a f <<<"$rest"
      total=$((total + f[11] + f[12]))   # fields 14 utime, 15 stime
    fi
    kids=$(pgrep -P "$p" 2>/dev/null || true)
    [[ -n $kids ]] && mapfile -t -O "${#queue[@]}" queue <<<"$kids"
  done
  echo "$total"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if(NR==0){print "nan"; exit}
  if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

# ---------------------------------------------------------------- ports
for p in "$BACKEND_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$LEVEE_PORT" "$LEVEE_ADMIN_PORT"; do
  port_busy "$p" && die "127.0.0.1:$p is already in use (stop whatever listens there, or set BACKEND_PORT for the backend)"
done

# ---------------------------------------------------------------- backend
log "building bench/backend"
go build -o "$tmp/backend" ./bench/backend || die "bench/backend does not build"
GOMAXPROCS=1 "${ON_LOAD_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
BACKEND_PID=$!; PIDS+=("$BACKEND_PID")
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || { cat "$tmp/backend.log" >&2; die "backend not ready"; }

TARGETS=(direct)
declare -A URL PID HOSTHDR NOTE
URL[direct]="http://127.0.0.1:$BACKEND_PORT/"; PID[direct]=""; HOSTHDR[direct]=""

# ---------------------------------------------------------------- levee
LEVEE_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || LEVEE_REV="$LEVEE_REV+dirty"
log "building levee (./cmd/levee)"
if go build -o "$tmp/levee" ./cmd/levee >"$tmp/levee-build.log" 2>&1; then
  cat >"$tmp/levee.yaml" <<EOF
listen:
  - {addr: 127.0.0.1:$LEVEE_PORT, engine: nethttp}
  - {addr: 127.0.0.1:$LEVEE_FAST_PORT, engine: fasthttp}
admin: 127.0.0.1:$LEVEE_ADMIN_PORT
apps:
  bench:
    hosts: [bench.local]
    backends: [127.0.0.1:$BACKEND_PORT]
    limits:
      concurrency: 4096
      queue: {max_wait: 1s, max_len: 4096}
EOF
  GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee" serve --config "$tmp/levee.yaml" >"$tmp/levee.log" 2>&1 &
  PID[levee]=$!; PIDS+=("${PID[levee]}")
  if wait_http "http://127.0.0.1:$LEVEE_ADMIN_PORT/readyz" 10 \
     && wait_http "http://127.0.0.1:$LEVEE_PORT/" 5 -H 'Host: bench.local'; then
    URL[levee]="http://127.0.0.1:$LEVEE_PORT/"; HOSTHDR[levee]="bench.local"
    # the same process on its fasthttp listener: CPU is measured per target run
    if wait_http "http://127.0.0.1:$LEVEE_FAST_PORT/" 5 -H 'Host: bench.local'; then
      URL[levee-fasthttp]="http://127.0.0.1:$LEVEE_FAST_PORT/"; HOSTHDR[levee-fasthttp]="bench.local"
      PID[levee-fasthttp]=${PID[levee]}
    else
      NOTE[levee-fasthttp]="skipped: not ready"
    fi
  else
    log "LEVEE SKIPPED: started but not ready within 10 s (admin /readyz, then GET / with Host: bench.local); last log lines:"
    tail -15 "$tmp/levee.log" >&2 || true
    kill -TERM "${PID[levee]}" 2>/dev/null || true
    NOTE[levee]="skipped: not ready"
  fi
else
  log "LEVEE SKIPPED: ./cmd/levee does not build (the proxy may still be in progress); first errors:"
  head -15 "$tmp/levee-build.log" >&2 || true
  NOTE[levee]="skipped: does not build"
fi

# ---------------------------------------------------------------- nginx
NGINX_BIN=$(command -v nginx)
mkdir -p "$tmp/nginx/logs"
cat >"$tmp/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path       $tmp/nginx/proxy;
  fastcgi_temp_path     $tmp/nginx/fastcgi;
  uwsgi_temp_path       $tmp/nginx/uwsgi;
  scgi_temp_path        $tmp/nginx/scgi;
  keepalive_requests 1000000;
  keepalive_timeout  75s;
  upstream bench_backend {
    server 127.0.0.1:$BACKEND_PORT;
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://bench_backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
if "$NGINX_BIN" -t -q -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx.conf" >"$tmp/nginx-t.log" 2>&1; then
  "${ON_PROXY_CPU[@]}" "$NGINX_BIN" -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx.conf" >"$tmp/nginx.out" 2>&1 &
  PID[nginx]=$!; PIDS+=("${PID[nginx]}")
  if wait_http "http://127.0.0.1:$NGINX_PORT/" 10; then
    TARGETS+=(nginx); URL[nginx]="http://127.0.0.1:$NGINX_PORT/"; HOSTHDR[nginx]=""
  else
    log "nginx not ready:"; tail -10 "$tmp/nginx/logs/error.log" "$tmp/nginx.out" >&2 || true
    NOTE[nginx]="skipped: not ready"
  fi
else
  log "nginx config test failed:"; cat "$tmp/nginx-t.log" >&2; NOTE[nginx]="skipped: config error"
fi

# ---------------------------------------------------------------- haproxy
HAPROXY_BIN=$(command -v haproxy)
cat >"$tmp/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 8000
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client  30s
  timeout server  30s
  timeout http-keep-alive 75s
frontend fe_bench
  bind 127.0.0.1:$HAPROXY_PORT
  default_backend be_bench
backend be_bench
  server b1 127.0.0.1:$BACKEND_PORT
EOF
if "$HAPROXY_BIN" -c -q -f "$tmp/haproxy.cfg" >"$tmp/haproxy-c.log" 2>&1; then
  "${ON_PROXY_CPU[@]}" "$HAPROXY_BIN" -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.out" 2>&1 &
  PID[haproxy]=$!; PIDS+=("${PID[haproxy]}")
  if wait_http "http://127.0.0.1:$HAPROXY_PORT/" 10; then
    TARGETS+=(haproxy); URL[haproxy]="http://127.0.0.1:$HAPROXY_PORT/"; HOSTHDR[haproxy]=""
  else
    log "haproxy not ready:"; tail -10 "$tmp/haproxy.out" >&2 || true
    NOTE[haproxy]="skipped: not ready"
  fi
else
  log "haproxy config check failed:"; cat "$tmp/haproxy-c.log" >&2; NOTE[haproxy]="skipped: config error"
fi

[[ -n ${URL[levee]:-} ]] && TARGETS+=(levee)
[[ -n ${URL[levee-fasthttp]:-} ]] && TARGETS+=(levee-fasthttp)

# ---------------------------------------------------------------- load
# run_wrk TARGET DURATION OUTFILE
run_wrk() {
  local t=$1 d=$2 out=$3 limit
  local -a hdr=()
  [[ -n ${HOSTHDR[$t]} ]] && hdr=(-H "Host: ${HOSTHDR[$t]}")
  limit=$(( $(to_secs "$d") + 15 ))
  # in the background + wait, so a TERM/INT to this script runs the trap at once (which kills wrk)
  "${ON_LOAD_CPU[@]}" timeout -k 5 "$limit" wrk -t1 -c"$CONNS" -d"$d" --latency "${hdr[@]}" "${URL[$t]}" >"$out" 2>&1 &
  WRK_PID=$!
  if ! wait "$WRK_PID"; then WRK_PID=""; log "wrk against $t failed:"; cat "$out" >&2; return 1; fi
  WRK_PID=""
}

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
for t in "${TARGETS[@]}"; do run_wrk "$t" "$WARMUP" "$tmp/warmup-$t.txt" || true; done

CLK_TCK=$(getconf CLK_TCK)
for ((r=1; r<=ROUNDS; r++)); do
  for t in "${TARGETS[@]}"; do
    out="$tmp/wrk-$t-$r.txt"
    c0=0; [[ -n ${PID[$t]:-} ]] && c0=$(cpu_ticks "${PID[$t]}")
    if ! run_wrk "$t" "$DURATION" "$out"; then continue; fi
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
# shellcheck disable=SC2086  # word-splitting of the per-round lists is intended
med() { median ${1:-}; }
d_rps=$(med "${RPS[direct]:-}"); d_p50=$(med "${P50[direct]:-}"); d_p99=$(med "${P99[direct]:-}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if(b+0==0 || a=="nan") print "n/a"; else printf "%.2f\n", a/b }'; }
rounds() { awk -v l="$1" 'BEGIN{ n=split(l,a," "); for(i=1;i<=n;i++) printf "%s%.0f", (i>1?" / ":""), a[i]; print "" }'; }
fmt()   { awk -v v="$1" -v p="$2" 'BEGIN{ if(v=="nan"||v=="") print "n/a"; else printf "%." p "f\n", v }'; }

table="$tmp/table.md"
{
  echo "| target | req/s (median) | req/s vs direct | p50 ms | p50 vs direct | p99 ms | p99 vs direct | proxy CPU µs/req | errors | req/s per round |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
  for t in direct levee levee-fasthttp nginx haproxy; do
    if [[ -z ${RPS[$t]:-} ]]; then
      [[ $t == direct ]] && continue
      echo "| $t | ${NOTE[$t]:-skipped} | | | | | | | | |"; continue
    fi
    rps=$(med "${RPS[$t]}"); p50=$(med "${P50[$t]}"); p99=$(med "${P99[$t]}")
    cpu="—"; [[ -n ${CPU[$t]:-} ]] && cpu=$(fmt "$(med "${CPU[$t]}")" 1)
    echo "| $t | $(fmt "$rps" 0) | $(ratio "$rps" "$d_rps") | $(fmt "$p50" 3) | $(ratio "$p50" "$d_p50") | $(fmt "$p99" 3) | $(ratio "$p99" "$d_p99") | $cpu | ${ERR[$t]:-0} | $(rounds "${RPS[$t]}") |"
  done
} >"$table"

CPU_MODEL=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
NGINX_VER=$("$NGINX_BIN" -v 2>&1 | sed 's/.*version: //')
HAPROXY_VER=$("$HAPROXY_BIN" -v 2>/dev/null | awk 'NR==1{print $3}')
WRK_VER=$(wrk -v 2>&1 | awk 'NR==1{print $2}' || true)
GO_VER=$(go env GOVERSION)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
CMD="DURATION=$DURATION ROUNDS=$ROUNDS bash bench/proxy.sh"
((WRITE)) && CMD+=" --write"

{
  echo "Plain proxy benchmark — wrk -t1 -c$CONNS -d$DURATION, $ROUNDS interleaved rounds (median), 100-byte responses"
  echo "machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}; pinning: $( ((PINNED)) && echo "proxy CPU $PROXY_CPU, backend+wrk CPU $LOAD_CPU" || echo off)"
  echo "versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER"
  echo
  cat "$table"
}

# ---------------------------------------------------------------- --write
if ((WRITE)); then
  if [[ -z ${RPS[levee]:-} ]]; then
    log "--write: levee did not run, docs/benchmarks.md left unchanged"
  else
    doc="$ROOT/docs/benchmarks.md"
    mkdir -p "$ROOT/docs"
    # shellcheck disable=SC2016  # literal backticks (Markdown)
    [[ -f $doc ]] || printf '# Benchmarks\n\nNumbers measured with the scripts in `bench/` (see bench/README.md).\n' >"$doc"
    section="$tmp/section.md"
    {
      echo "<!-- bench/proxy.sh:begin -->"
      echo "## Plain proxy throughput and latency (bench/proxy.sh)"
      echo
      echo "- command: \`$CMD\`"
      echo "- date: $DATE"
      echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr)"
      echo "- load: wrk -t1 -c$CONNS -d$DURATION --latency, $WARMUP warm-up per target, $ROUNDS interleaved rounds, medians shown; backend answers 100 bytes"
      echo "- setup: one worker thread per proxy (levee GOMAXPROCS=1, nginx worker_processes 1, haproxy nbthread 1), keep-alive to the backend, no access logs; pinning: $( ((PINNED)) && echo "proxies on CPU $PROXY_CPU, backend (GOMAXPROCS=1) + wrk on CPU $LOAD_CPU" || echo "none")"
      echo "- versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER"
      echo
      cat "$table"
      echo
      echo "Ratios are against \`direct\` (wrk straight to the backend): req/s ratio higher is better, latency ratios lower is better. Proxy CPU is the proxy's utime+stime per request."
      echo "<!-- bench/proxy.sh:end -->"
    } >"$section"
    if grep -q '<!-- bench/proxy.sh:begin -->' "$doc"; then
      awk -v sec="$section" '
        /<!-- bench\/proxy.sh:begin -->/ { while ((getline l < sec) > 0) print l; skip=1; next }
        /<!-- bench\/proxy.sh:end -->/   { skip=0; next }
        !skip' "$doc" >"$tmp/doc.new"
      cat "$tmp/doc.new" >"$doc"
    else
      { echo; cat "$section"; } >>"$doc"
    fi
    log "wrote section to docs/benchmarks.md"
  fi
fi
