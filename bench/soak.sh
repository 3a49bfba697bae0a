#!/usr/bin/env bash
# bench/soak.sh — a long run at 5x overload: do levee's goroutines, open files and memory stay flat?
#
# Usage:  bash bench/soak.sh            (10 minutes; run it alone on the machine)
#         DURATION=60s bash bench/soak.sh   (a short check that it works)
# Environment (defaults in brackets):
#   DURATION [10m]   how long the load runs (at most 10m, loadgen's bound)
#   SAMPLE [10]      seconds between samples
#   OVERLOAD [5]     offered load as a multiple of the backend's capacity
#   CAPACITY [8] DELAY [5ms]    backend: 8 concurrent x 5 ms = 1,600 req/s, so 8,000 req/s offered
#                               (loadgen shares a core with the backend: at 32,000/s it fell over a
#                               second behind within 10 s, and an open-loop loadgen then counts every
#                               request as timed out before it is sent)
#   CONNS [512]      loadgen connection pool     TIMEOUT [1s]  per request, from its intended send time
#   TOLERANCE [10]   % a metric's last-minute mean may exceed its first-minute mean and still be flat,
#                    on top of a floor for noise: 50 goroutines, 50 open files, 8 MiB of RSS
#   PIN [auto]       "0" disables taskset      BACKEND_PORT [9191]
#
# What runs (all on 127.0.0.1, all started here as children, all stopped by the trap):
#   backend  bench/backend -capacity CAPACITY -delay DELAY (GOMAXPROCS=1), as in overload.sh: the
#            requests beyond capacity wait for a slot
#   levee    start_levee with no limits: the config a new user writes (default limits: concurrency
#            1024, queue 1024 x 50 ms), GOMAXPROCS=1, one plain listener 18582, admin 18592 (pprof on)
#   loadgen  bench/loadgen, open loop at OVERLOAD x capacity for DURATION, progress every second
# Every SAMPLE seconds one CSV row (bench/out/soak-YYYYmmdd-HHMMSS.csv): seconds since the start,
# levee's goroutines (/debug/pprof/goroutine?debug=1, its first line), open files
# (/proc/PID/fd), VmRSS (KiB), and loadgen's requests answered 2xx, refused (non-2xx), timed out
# and failed since the previous row. Then a summary: each resource's first-minute and last-minute
# means, its least-squares slope per minute over the whole run, and "flat" or "GROWING".
set -euo pipefail

BENCH_NAME=soak.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 26 "$@"

DURATION=${DURATION:-10m}
SAMPLE=${SAMPLE:-10}
OVERLOAD=${OVERLOAD:-5}
CAPACITY=${CAPACITY:-8}
DELAY=${DELAY:-5ms}
CONNS=${CONNS:-512}
TIMEOUT=${TIMEOUT:-1s}
TOLERANCE=${TOLERANCE:-10}
BACKEND_PORT=${BACKEND_PORT:-9191}
LEVEE_PORT=18582
LEVEE_ADMIN_PORT=18592

[[ $SAMPLE =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: SAMPLE must be whole seconds, got $SAMPLE" >&2; exit 2; }
bench_init levee-soak
bench_need_tools curl
bench_pinning "levee on CPU $PROXY_CPU; backend (GOMAXPROCS=1) + loadgen share CPU $LOAD_CPU"
check_ports backend "$BACKEND_PORT" "$LEVEE_PORT" "$LEVEE_ADMIN_PORT"

DUR_S=$(to_secs "$DURATION")
((DUR_S >= 1 && DUR_S <= 600)) || die "DURATION must be 1s..10m (loadgen's bound), got $DURATION"
CAP_RPS=$(awk -v c="$CAPACITY" -v d="$DELAY" 'BEGIN{ n=d+0; u=d; sub(/^[0-9.]+/,"",u)
  if(u=="ms") n/=1000; else if(u=="us"||u=="µs") n/=1e6; else if(u!="s") { print "0"; exit }
  printf "%.0f\n", c/n }')
[[ $CAP_RPS =~ ^[1-9][0-9]*$ ]] || die "DELAY must be like 5ms, 500us or 1s (got $DELAY)"
RATE=$(awk -v c="$CAP_RPS" -v x="$OVERLOAD" 'BEGIN{ printf "%.0f\n", c*x }')

log "building bench/backend and bench/loadgen"
build_bench backend
build_bench loadgen
GOMAXPROCS=1 "${ON_BACKEND_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" -capacity "$CAPACITY" -delay "$DELAY" >"$tmp/backend.log" 2>&1 &
PIDS+=("$!")
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || { cat "$tmp/backend.log" >&2; die "backend not ready"; }

declare -A URL PID HOSTHDR NOTE
start_levee ""
[[ -n ${URL[levee]:-} ]] || die "levee ${NOTE[levee]:-did not start}"
LPID=${PID[levee]}

mkdir -p "$ROOT/bench/out"
CSV="$ROOT/bench/out/soak-$(date -u +%Y%m%d-%H%M%S).csv"
echo "t_s,goroutines,fds,rss_kib,ok,refused,timeouts,errors" >"$CSV"

# goroutines — levee's goroutine count, from the first line of its goroutine profile ("goroutine
# profile: total N"); awk reads to the end, so curl never sees a closed pipe
goroutines() {
  curl -s -m 5 "http://127.0.0.1:$LEVEE_ADMIN_PORT/debug/pprof/goroutine?debug=1" | awk 'NR==1{print $NF}'
}
# counts — loadgen's cumulative "ok rejected timeouts errors" from its last progress line
counts() {
  grep '^loadgen: sent' "$tmp/loadgen.err" 2>/dev/null | tail -1 |
    sed -E 's/.*ok ([0-9]+), rejected ([0-9]+), timeouts ([0-9]+)\+([0-9]+) unsent, errors ([0-9]+).*/\1 \2 \3 \4 \5/' |
    awk 'NF==5{print $1, $2, $3+$4, $5; ok=1} END{ if(!ok) print "0 0 0 0" }'
}

log "levee $LEVEE_REV pid $LPID; backend $CAPACITY x $DELAY = $CAP_RPS req/s; offering ${OVERLOAD}x = $RATE req/s for $DURATION, $CONNS conns, sampling every ${SAMPLE}s into ${CSV#"$ROOT"/}"
"${ON_LOAD_CPU[@]}" timeout -k 5 $((DUR_S + $(to_secs "$TIMEOUT") + 30)) "$tmp/loadgen" \
  -url "${URL[levee]}" -host "${HOSTHDR[levee]}" -rate "$RATE" -duration "$DURATION" -conns "$CONNS" \
  -timeout "$TIMEOUT" -label soak -kv "$tmp/loadgen.kv" >"$tmp/loadgen.json" 2>"$tmp/loadgen.err" &
LOAD_PID=$!
start=$SECONDS
prev=(0 0 0 0)
# Samples at SAMPLE, 2 x SAMPLE, ... strictly inside the run: one at its very end would catch the
# load generator closing its connections.
for ((i = 1; i * SAMPLE < DUR_S; i++)); do
  wait_s=$((start + i * SAMPLE - SECONDS))
  if ((wait_s > 0)); then sleep "$wait_s"; fi
  kill -0 "$LOAD_PID" 2>/dev/null || break
  kill -0 "$LPID" 2>/dev/null || die "levee exited during the soak; last log lines: $(tail -5 "$tmp/levee.log")"
  g=$(goroutines || true); fds=$(ls "/proc/$LPID/fd" 2>/dev/null | wc -l || true)
  rss=$(awk '/^VmRSS:/{print $2}' "/proc/$LPID/status" 2>/dev/null || true)
  read -r -a cur < <(counts)
  printf '%d,%s,%d,%d,%d,%d,%d,%d\n' $((SECONDS - start)) "${g:-0}" "${fds:-0}" "${rss:-0}" \
    $((cur[0] - prev[0])) $((cur[1] - prev[1])) $((cur[2] - prev[2])) $((cur[3] - prev[3])) >>"$CSV"
  prev=("${cur[@]}")
  log "$(tail -1 "$CSV")"
done
wait "$LOAD_PID" || { LOAD_PID=""; log "loadgen failed:"; tail -5 "$tmp/loadgen.err" >&2; die "no summary"; }
LOAD_PID=""
(($(wc -l <"$CSV") > 1)) || die "no samples: DURATION is not longer than SAMPLE"

# ---------------------------------------------------------------- summary
# The first and last minutes' means (they overlap in a run under 2 minutes), the slope by least
# squares over every sample, and flat: last <= first x (1 + TOLERANCE/100) + the metric's floor.
bench_versions
echo
echo "Soak — levee $LEVEE_REV ($GO_VER), $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $DATE"
echo "backend $CAPACITY x $DELAY = $CAP_RPS req/s; ${OVERLOAD}x = $RATE req/s offered for $DURATION over $CONNS conns; default limits; pinning: $PIN_DESC"
echo "samples: ${CSV#"$ROOT"/}"
echo
awk -F, -v tol="$TOLERANCE" '
  NR == 1 { next }
  { n++; t[n] = $1; for (c = 2; c <= 8; c++) v[c, n] = $c }
  END {
    split("goroutines fds rss_kib", name, " "); split("50 50 8192", floor, " ")
    last = t[n]; short = last < 120
    if (short) print "(a run under 2 minutes: the first and last minutes overlap, so there is no verdict)"
    printf "| %-10s | %12s | %12s | %14s | %s |\n", "resource", "first minute", "last minute", "slope per min", "verdict"
    print "|------------|-------------:|-------------:|---------------:|---------|"
    for (m = 1; m <= 3; m++) {
      c = m + 1; f = fn = l = ln = st = sv = stt = stv = 0
      for (i = 1; i <= n; i++) {
        x = v[c, i]
        if (t[i] <= 60) { f += x; fn++ }
        if (t[i] > last - 60) { l += x; ln++ }
        st += t[i]; sv += x; stt += t[i] * t[i]; stv += t[i] * x
      }
      f /= fn; l /= ln
      d = n * stt - st * st; slope = (d > 0) ? 60 * (n * stv - st * sv) / d : 0
      flat = (l <= f * (1 + tol / 100) + floor[m]) ? "flat" : "GROWING"
      if (short) flat = "n/a"
      if (flat == "GROWING") bad++
      printf "| %-10s | %12.0f | %12.0f | %+14.1f | %s |\n", name[m], f, l, slope, flat
    }
    for (i = 1; i <= n; i++) { ok += v[5, i]; rf += v[6, i]; to += v[7, i]; er += v[8, i] }
    span = last # the counts are from the start to the last sample
    printf "\nload, over the %d sampled seconds: %.0f/s answered 2xx, %.0f/s refused, %.0f/s timed out, %.0f/s failed\n",
      span, ok / span, rf / span, to / span, er / span
    printf "verdict: %s (flat = last-minute mean <= first-minute mean x %.2f + 50 goroutines / 50 fds / 8 MiB)\n",
      short ? "n/a, the run is too short" : bad ? "GROWING" : "flat", 1 + tol / 100
  }' "$CSV"
echo
echo "loadgen summary: $(cat "$tmp/loadgen.kv")"
