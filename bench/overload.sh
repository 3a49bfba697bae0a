#!/usr/bin/env bash
# bench/overload.sh — open-loop overload: goodput and latency of a fixed-capacity backend, direct
# (unprotected) and behind levee, nginx and haproxy with their overload protections.
#
# Usage:  bash bench/overload.sh [--write]
#   --write   also replace the "overload.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   DURATION [10s]   loadgen run per target and rate      RATES [19200 64000]  offered req/s (3x, 10x)
#   BASE_RATE [3200] unloaded reference (0.5x), run for BASE_DURATION [5s]; BASE_RATE=0 skips it
#   ROUNDS [1]       interleaved rounds (medians shown)   CONNS [512]  loadgen connection pool
#   TIMEOUT [1s]     per request, from its intended send time
#   CAPACITY [32] DELAY [5ms]   backend: 32 concurrent x 5 ms = 6,400 req/s
#   NGINX_LIMIT_REQ ["rate=6400r/s burst=64 nodelay"]  nginx limit_req on top of limit_conn 32
#                    ("off" = limit_conn only)
#   CAL_DURATION [3s] generator calibration run (0 = skip)   PIN [auto]  "0" disables taskset
#   PIN_MODE [alone]  alone: proxy on CPU 0, backend + loadgen on CPU 1; shared: proxy + backend on
#                     CPU 0, loadgen alone on CPU 1
#   BACKEND_PORT [9121]
#
# What runs (all on 127.0.0.1, all started here as children, all stopped by the trap):
#   backend  bench/backend -capacity 32 -delay 5ms, GOMAXPROCS=1: at most 32 requests at once, the
#            rest WAIT for a slot (and are served even if their client has left), like a thread pool
#   levee    GOMAXPROCS=1; app limits {concurrency: 32, queue: {max_wait: 10ms, max_len: 64}};
#            one plain listener 18282, as a new user writes it (HTTP/1.1 on the event loops)
#   nginx    worker_processes 1; limit_conn 32 per server (503) + limit_req (429), proxy_next_upstream off
#   haproxy  nbthread 1; server maxconn 32 + timeout queue 10ms (503)
#   loadgen  bench/loadgen: open loop, constant rate, latency from the intended send time (no
#            coordinated omission), at most CONNS keep-alive connections, TIMEOUT per request
# CPU pinning (taskset, >= 2 CPUs): the proxy on CPU 0; backend AND loadgen share CPU 1, so on a
# 2-core box the generator competes with the backend; the calibration run says how much load the
# generator can offer at all (against nginx "return 200" on CPU 0).
# Runtime at defaults: ~5 targets x (5 s + 2 x 10 s + drains) + builds = ~4 min (< 8 min).
set -euo pipefail

BENCH_NAME=overload.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 32 "$@"

DURATION=${DURATION:-10s}
RATES=${RATES:-19200 64000}
BASE_RATE=${BASE_RATE:-3200}
BASE_DURATION=${BASE_DURATION:-5s}
ROUNDS=${ROUNDS:-1}
CONNS=${CONNS:-512}
TIMEOUT=${TIMEOUT:-1s}
CAPACITY=${CAPACITY:-32}
DELAY=${DELAY:-5ms}
NGINX_LIMIT_REQ=${NGINX_LIMIT_REQ:-rate=6400r/s burst=64 nodelay}
CAL_DURATION=${CAL_DURATION:-3s}
BACKEND_PORT=${BACKEND_PORT:-9121}
NGINX_PORT=18280
HAPROXY_PORT=18281
LEVEE_PORT=18282

CAL_PORT=18284
LEVEE_ADMIN_PORT=18292

bench_init levee-overload
bench_need_tools nginx haproxy curl
bench_pinning "proxy on CPU $PROXY_CPU; backend (GOMAXPROCS=1) + loadgen share CPU $LOAD_CPU"

# ---------------------------------------------------------------- helpers
# cpu_snap N — "busy total" jiffies of CPU N from /proc/stat
cpu_snap() { awk -v c="cpu$1" '$1==c{ print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9; exit }' /proc/stat; }
# busy_pct "B0 T0" "B1 T1" — % busy between two snapshots
busy_pct() { awk -v a="$1" -v b="$2" 'BEGIN{ split(a,x," "); split(b,y," "); t=y[2]-x[2]; printf "%.0f", (t>0 ? 100*(y[1]-x[1])/t : 0) }'; }

# kv FILE KEY — a value from a loadgen -kv line
kv() { tr ' ' '\n' <"$1" | awk -F= -v k="$2" '$1==k{print substr($0, length(k)+2); exit}'; }

# wait until the backend answers an unloaded request quickly again (its backlog of abandoned
# requests from the previous run has drained), at most 60 s
wait_drained() {
  local deadline=$((SECONDS + 60)) t
  while ((SECONDS < deadline)); do
    t=$(curl -s -o /dev/null -m 2 -w '%{time_total}' "http://127.0.0.1:$BACKEND_PORT/" 2>/dev/null || echo 9)
    if awk -v t="$t" 'BEGIN{exit !(t < 0.05)}'; then return 0; fi
    sleep 0.5
  done
  log "warning: backend still slow (${t}s for one request) after 60 s"
}

# ---------------------------------------------------------------- ports
check_ports backend "$BACKEND_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$LEVEE_PORT" "$CAL_PORT" "$LEVEE_ADMIN_PORT"

# ---------------------------------------------------------------- builds
log "building bench/backend and bench/loadgen"
build_bench backend
build_bench loadgen
CAP_RPS=$(awk -v c="$CAPACITY" -v d="$DELAY" 'BEGIN{ n=d+0; u=d; sub(/^[0-9.]+/,"",u)
  if(u=="ms") n/=1000; else if(u=="us"||u=="µs") n/=1e6; else if(u!="s") { print "0"; exit }
  printf "%.0f\n", c/n }')
[[ $CAP_RPS =~ ^[1-9][0-9]*$ ]] || die "DELAY must be like 5ms, 500us or 1s (got $DELAY)"

GOMAXPROCS=1 "${ON_BACKEND_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" -capacity "$CAPACITY" -delay "$DELAY" -stats >"$tmp/backend.log" 2>&1 &
BACKEND_PID=$!; PIDS+=("$BACKEND_PID")
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || { cat "$tmp/backend.log" >&2; die "backend not ready"; }
log "backend: $CAPACITY concurrent x $DELAY = $CAP_RPS req/s capacity"

TARGETS=(direct)
declare -A URL PID HOSTHDR NOTE
URL[direct]="http://127.0.0.1:$BACKEND_PORT/"; PID[direct]=""; HOSTHDR[direct]=""

# ---------------------------------------------------------------- levee
start_levee "      concurrency: $CAPACITY
      queue: {max_wait: 10ms, max_len: 64}"

# ---------------------------------------------------------------- nginx
NGINX_BIN=$(command -v nginx)
mkdir -p "$tmp/nginx/logs"
if [[ $NGINX_LIMIT_REQ == off ]]; then NGINX_REQ_ZONE=""; NGINX_REQ=""
else
  NGINX_REQ_RATE=${NGINX_LIMIT_REQ%% *}; NGINX_REQ_REST=${NGINX_LIMIT_REQ#"$NGINX_REQ_RATE"}
  NGINX_REQ_ZONE="limit_req_zone \$server_name zone=perserver_rate:1m $NGINX_REQ_RATE;"
  NGINX_REQ="limit_req zone=perserver_rate$NGINX_REQ_REST; limit_req_status 429;"
fi
{
  nginx_conf_head crit 8192 "worker_rlimit_nofile 20000;"
  cat <<EOF
  limit_conn_zone \$server_name zone=perserver:1m;
  $NGINX_REQ_ZONE
  upstream bench_backend {
    server 127.0.0.1:$BACKEND_PORT;
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    server_name bench.local;
    limit_conn perserver $CAPACITY;
    limit_conn_status 503;
    limit_conn_log_level info;
    $NGINX_REQ
    limit_req_log_level info;
    location / {
      proxy_pass http://bench_backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_next_upstream off;
    }
  }
  # generator calibration only: a trivial, fast target on the proxy CPU
  server {
    listen 127.0.0.1:$CAL_PORT;
    location / { return 200 "calibration\n"; }
  }
}
EOF
} >"$tmp/nginx.conf"
start_nginx_target

# ---------------------------------------------------------------- haproxy
HAPROXY_BIN=$(command -v haproxy)
write_haproxy_single "  timeout queue 10ms" "maxconn $CAPACITY"
start_haproxy_target

[[ -n ${URL[levee]:-} ]] && TARGETS+=(levee)

# ---------------------------------------------------------------- load
# run_lg URL HOST RATE DURATION LABEL KVFILE
run_lg() {
  local url=$1 host=$2 rate=$3 d=$4 label=$5 kvf=$6 limit
  local -a hdr=()
  [[ -n $host ]] && hdr=(-host "$host")
  limit=$(( $(to_secs "$d") + $(to_secs "$TIMEOUT") + 20 ))
  "${ON_LOAD_CPU[@]}" timeout -k 5 "$limit" "$tmp/loadgen" -url "$url" "${hdr[@]}" -rate "$rate" -duration "$d" \
    -conns "$CONNS" -timeout "$TIMEOUT" -label "$label" -q -kv "$kvf" >"${kvf%.kv}.json" 2>"${kvf%.kv}.err" &
  LOAD_PID=$!
  if ! wait "$LOAD_PID"; then LOAD_PID=""; log "loadgen against $label failed:"; cat "${kvf%.kv}.err" >&2; return 1; fi
  LOAD_PID=""
}

# cpu_idle_pct — % of all CPUs idle over one second (other work on the machine skews every row)
cpu_idle_pct() {
  local a b
  read -r -a a < <(head -1 /proc/stat); sleep 1; read -r -a b < <(head -1 /proc/stat)
  awk -v u="$((b[1]+b[2]+b[3]+b[6]+b[7]+b[8] - a[1]-a[2]-a[3]-a[6]-a[7]-a[8]))" \
      -v i="$((b[4]+b[5] - a[4]-a[5]))" 'BEGIN{ t=u+i; printf "%.0f\n", (t>0 ? 100*i/t : 100) }'
}
IDLE=$(cpu_idle_pct)
if ((IDLE < 90)) && [[ ${IDLE_WAIT:-120} != 0 ]]; then
  log "the machine is busy (${IDLE}% idle); waiting up to ${IDLE_WAIT:-120} s for it to quieten (IDLE_WAIT=0 skips)"
  idle_deadline=$((SECONDS + ${IDLE_WAIT:-120}))
  while ((IDLE < 90 && SECONDS < idle_deadline)); do IDLE=$(cpu_idle_pct); done
fi
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
BUSY_NOTE=""
((IDLE < 90)) && BUSY_NOTE=" — WARNING: only ${IDLE}% of the CPUs were idle before the runs; other processes compete with the bench and every row is pessimistic"
log "before the runs: ${IDLE}% CPU idle, load average $LOADAVG$BUSY_NOTE"

CAL_NOTE="not run"
# shellcheck disable=SC2086  # RATES is a space-separated list
MAX_RATE=$(printf '%s\n' $RATES | sort -g | tail -1)
if [[ $CAL_DURATION != 0 && -n ${PID[nginx]:-} ]]; then
  log "calibration: loadgen at $MAX_RATE/s for $CAL_DURATION against nginx 'return 200' (generator on CPU $LOAD_CPU alone)"
  if run_lg "http://127.0.0.1:$CAL_PORT/" "" "$MAX_RATE" "$CAL_DURATION" calibration "$tmp/cal.kv"; then
    cal_sent=$(kv "$tmp/cal.kv" offered_rate); cal_ok=$(kv "$tmp/cal.kv" goodput_rps); cal_lag=$(kv "$tmp/cal.kv" lag_p99_ms)
    CAL_NOTE=$(awk -v r="$MAX_RATE" -v s="$cal_sent" -v ok="$cal_ok" -v lag="$cal_lag" 'BEGIN{
      printf "offered %.0f/s, sent %.0f/s (%.0f%%), answered within the timeout %.0f/s, wake-up lag p99 %s ms", r, s, 100*s/r, ok, lag
      if (ok < 0.95*r) printf " — THE GENERATOR CANNOT OFFER %.0f/s ON THIS MACHINE: rows at that rate saw less, see \"sent/s\"", r }')
    log "calibration: $CAL_NOTE"
  fi
fi

CLK_TCK=$(getconf CLK_TCK)
RUN_RATES=()
[[ $BASE_RATE != 0 ]] && RUN_RATES+=("$BASE_RATE")
for r in $RATES; do RUN_RATES+=("$r"); done
declare -A R_C0 R_C1 R_SENT R_GOOD R_P50 R_P99 R_CODES R_TO R_UNSENT R_ERR R_CPU R_LAG
for ((round=1; round<=ROUNDS; round++)); do
  for rate in "${RUN_RATES[@]}"; do
    d=$DURATION; [[ $rate == "$BASE_RATE" ]] && d=$BASE_DURATION
    for t in "${TARGETS[@]}"; do
      wait_drained
      k="$t@$rate"; kvf="$tmp/lg-$t-$rate-$round.kv"
      c0=0; [[ -n ${PID[$t]:-} ]] && c0=$(cpu_ticks "${PID[$t]}")
      s0=$(date +%s.%N); p0=$(cpu_snap "$PROXY_CPU"); l0=$(cpu_snap "$LOAD_CPU")
      run_lg "${URL[$t]}" "${HOSTHDR[$t]}" "$rate" "$d" "$t" "$kvf" || continue
      s1=$(date +%s.%N); p1=$(cpu_snap "$PROXY_CPU"); l1=$(cpu_snap "$LOAD_CPU")
      R_C0[$k]+="$(busy_pct "$p0" "$p1") "; R_C1[$k]+="$(busy_pct "$l0" "$l1") "
      c1=0; [[ -n ${PID[$t]:-} ]] && c1=$(cpu_ticks "${PID[$t]}")
      R_SENT[$k]+="$(kv "$kvf" offered_rate) "; R_GOOD[$k]+="$(kv "$kvf" goodput_rps) "
      R_P50[$k]+="$(kv "$kvf" ok_p50_ms) "; R_P99[$k]+="$(kv "$kvf" ok_p99_ms) "
      R_TO[$k]+="$(kv "$kvf" timeouts) "; R_UNSENT[$k]+="$(kv "$kvf" unsent) "; R_ERR[$k]+="$(kv "$kvf" errors) "
      R_LAG[$k]+="$(kv "$kvf" lag_p99_ms) "
      R_CODES[$k]="$(kv "$kvf" codes)"   # last round's; per-round lines on stderr
      if [[ -n ${PID[$t]:-} ]]; then
        R_CPU[$k]+="$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v s="$(awk -v a="$s0" -v b="$s1" 'BEGIN{print b-a}')" 'BEGIN{printf "%.0f", 100*d/hz/s}') "
      fi
      log "round $round/$ROUNDS $t @ $rate/s: $(cat "$kvf")"
    done
  done
done

# ---------------------------------------------------------------- table
codes_md() { [[ $1 == - || -z $1 ]] && { echo "—"; return; }; echo "$1" | sed 's/:/: /g; s/,/, /g'; }

table="$tmp/table.md"
{
  echo "| target | offered req/s (sent/s) | goodput / capacity | p50 ms (2xx) | p99 ms (2xx) | rejections by code | timeouts (of them unsent) | errors | proxy CPU | CPU$PROXY_CPU / CPU$LOAD_CPU busy | loadgen lag p99 ms |"
  echo "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"
  for rate in "${RUN_RATES[@]}"; do
    mult=$(awk -v r="$rate" -v c="$CAP_RPS" 'BEGIN{ x=r/c; printf (x==int(x) ? "%dx" : "%.1fx"), x }')
    for t in direct levee nginx haproxy; do
      k="$t@$rate"
      if [[ -z ${R_GOOD[$k]:-} ]]; then
        [[ $t == direct ]] && continue
        echo "| $t | $rate ($mult) | ${NOTE[$t]:-skipped} | | | | | | | | |"; continue
      fi
      good=$(med "${R_GOOD[$k]}")
      cpu="—"; [[ -n ${R_CPU[$k]:-} ]] && cpu="$(fmt "$(med "${R_CPU[$k]}")" 0)%"
      p50=$(med "${R_P50[$k]}"); p99=$(med "${R_P99[$k]}")
      if [[ $(fmt "$good" 0) == 0 ]]; then p50="n/a"; p99="n/a"; fi
      echo "| $t | $rate ($mult) ($(fmt "$(med "${R_SENT[$k]}")" 0)) | $(awk -v g="$good" -v c="$CAP_RPS" 'BEGIN{printf "%.2f", g/c}') | $(fmt "$p50" 1) | $(fmt "$p99" 1) | $(codes_md "${R_CODES[$k]}") | $(fmt "$(med "${R_TO[$k]}")" 0) ($(fmt "$(med "${R_UNSENT[$k]}")" 0)) | $(fmt "$(med "${R_ERR[$k]}")" 0) | $cpu | $(fmt "$(med "${R_C0[$k]}")" 0)% / $(fmt "$(med "${R_C1[$k]}")" 0)% | $(fmt "$(med "${R_LAG[$k]}")" 1) |"
    done
  done
  echo
  for rate in "${RUN_RATES[@]}"; do
    for peer in nginx haproxy; do
      lg=$(med "${R_GOOD[levee@$rate]:-}"); pg=$(med "${R_GOOD[$peer@$rate]:-}")
      lp=$(med "${R_P99[levee@$rate]:-}"); pp=$(med "${R_P99[$peer@$rate]:-}")
      lc=$(med "${R_CPU[levee@$rate]:-}"); pc=$(med "${R_CPU[$peer@$rate]:-}")
      echo "- at $rate/s, levee ÷ $peer (same run): goodput $(ratio "$lg" "$pg"), served p99 $(ratio "$lp" "$pp"), proxy CPU $(ratio "$lc" "$pc")"
    done
  done
} >"$table"

bench_versions
CMD="PIN_MODE=$PIN_MODE DURATION=$DURATION ROUNDS=$ROUNDS bash bench/overload.sh"
[[ $PIN_MODE == shared ]] && DOC_SECTION=overload.sh-shared
((WRITE)) && CMD+=" --write"
NGINX_DESC="limit_conn 32 per server (503)"; [[ $NGINX_LIMIT_REQ != off ]] && NGINX_DESC+=" + limit_req $NGINX_LIMIT_REQ (429)"
NGINX_DESC+=", proxy_next_upstream off"

{
  echo "Overload benchmark — backend $CAPACITY x $DELAY = $CAP_RPS req/s; open-loop loadgen, $CONNS conns, timeout $TIMEOUT from intended send time; $DURATION per run (baseline $BASE_DURATION), $ROUNDS round(s)"
  echo "machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}; before the runs ${IDLE}% idle, load average $LOADAVG$BUSY_NOTE; pinning: $PIN_DESC"
  echo "generator calibration: $CAL_NOTE"
  echo "versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER"
  echo
  cat "$table"
}

# ---------------------------------------------------------------- --write
if ((WRITE)); then
  if [[ -z ${R_GOOD[levee@${RUN_RATES[-1]}]:-} ]]; then
    log "--write: levee did not run, docs/benchmarks.md left unchanged"
  else
    {
      echo "## Overload: goodput under open-loop load (bench/overload.sh, PIN_MODE=$PIN_MODE)"
      echo
      echo "- command: \`$CMD\`"
      echo "- date: $DATE"
      echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr); before the runs ${IDLE}% CPU idle, load average $LOADAVG$BUSY_NOTE"
      echo "- backend: \`bench/backend -capacity $CAPACITY -delay $DELAY\` (GOMAXPROCS=1): at most $CAPACITY requests at once, $DELAY each, = **$CAP_RPS req/s nominal capacity** (Go timer overshoot, ~0.4 ms per 5 ms sleep here, puts the real ceiling near 5,900 req/s); requests beyond capacity wait for a slot and are served even after their client gave up"
      echo "- load: \`bench/loadgen\`, open loop at a constant rate, latency from each request's intended send time (no coordinated omission), at most $CONNS keep-alive connections, timeout $TIMEOUT per request from its intended send time; $DURATION per run, baseline (0.5x) $BASE_DURATION; $ROUNDS round(s), medians shown"
      echo "- protections: levee \`limits: {concurrency: $CAPACITY, queue: {max_wait: 10ms, max_len: 64}}\` (GOMAXPROCS=1, one plain listener: HTTP/1.1 on the event loops); nginx $NGINX_DESC (worker_processes 1); haproxy server \`maxconn $CAPACITY\` + \`timeout queue 10ms\` (nbthread 1); direct = loadgen straight to the backend"
      echo "- pinning: $PIN_DESC"
      echo "- generator calibration (loadgen at $MAX_RATE/s for $CAL_DURATION against nginx \`return 200\` on CPU $PROXY_CPU): $CAL_NOTE"
      echo "- versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER"
      echo
      cat "$table"
      echo
      echo "Goodput = 2xx answered within the timeout per second, over capacity ($CAP_RPS/s). \"offered\" is the scheduled rate and, in brackets, the rate of requests actually written; below the schedule when every connection was busy (the rest waited and, past their timeout, count as unsent timeouts) or when the generator ran out of CPU (see the calibration). Latency percentiles are of 2xx responses only, from the intended send time. Proxy CPU is the proxy's utime+stime over the run, in % of one core. CPU$PROXY_CPU / CPU$LOAD_CPU busy is each core's busy share over the run, whoever used it: CPU$PROXY_CPU busy well above proxy CPU means other processes took the proxy's core; CPU$LOAD_CPU near 100% means the generator and backend core was saturated, so the generator, not the target, limited that row. Loadgen lag is how late the generator itself woke up for requests that had a free connection (its own accuracy; large values mean the generator was short of CPU)."
    } >"$tmp/section-body.md"
    write_doc_section "$tmp/section-body.md"
  fi
fi
