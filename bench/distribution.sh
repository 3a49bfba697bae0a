#!/usr/bin/env bash
# bench/distribution.sh — how evenly levee, nginx and haproxy spread requests over 4 backends.
#
# Usage:  bash bench/distribution.sh [--write]
#   --write   also replace the "distribution.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   DURATION [10s]  wrk run per target per scenario   WARMUP [1s]  untimed run before each target
#   CONNS    [64]   wrk connections (one wrk thread)   PIN [auto]   "0" disables taskset pinning
#   FAST_DELAY [1ms]  every backend's delay in (A), the three others' in (B)
#   SLOW_DELAY [20ms] backend b1's delay in (B)
#   BACKEND_PORT [9141]  backends listen on BACKEND_PORT .. BACKEND_PORT+3
#
# Scenarios: (A) 4 identical backends (all FAST_DELAY); (B) b1 slow (SLOW_DELAY), b2-b4 FAST_DELAY.
# Targets (all on 127.0.0.1, started per scenario, stopped by PID at its end and by the trap):
#   levee-p2c, levee-rr   one levee process (GOMAXPROCS=1), two apps on the same 4 backends:
#                         Host p2c.local (balance: p2c), Host rr.local (balance: round_robin); :18384, admin :18394
#   nginx-rr, nginx-lc    one nginx (worker_processes 1), upstream round robin :18380 / least_conn :18381
#   haproxy-rr, haproxy-lc  one haproxy (nbthread 1), balance roundrobin :18382 / leastconn :18383
# Every proxy keeps connections to the backends alive (nginx keepalive 64 + HTTP/1.1, haproxy
# http-reuse always, levee's pool). Backends are bench/backend -count (GOMAXPROCS=1 each): they
# count the requests they answer and serve the count on GET /__count; the script reads the four
# counts before and after each timed run, so probes and warm-up are not counted.
# Pinning (taskset, >= 2 CPUs): proxies on CPU 0, the 4 backends and wrk on CPU 1.
# Per target and scenario: wrk req/s, max/mean of the backends' shares (1.00 = perfectly even),
# b1's share (in (B) the slow one; 25% = blind to its slowness), each backend's share, errors, and
# for levee rows the imbalance levee itself exports (levee_backend_imbalance{app}, last minute).
# Runtime at defaults: 2 scenarios x 6 targets x (1 s + 10 s) + starts and builds: ~2.5-3 min.
set -euo pipefail

BENCH_NAME=distribution.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 27 "$@"

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CONNS=${CONNS:-64}
FAST_DELAY=${FAST_DELAY:-1ms}
SLOW_DELAY=${SLOW_DELAY:-20ms}
BACKEND_PORT=${BACKEND_PORT:-9141}
NGINX_RR_PORT=18380
NGINX_LC_PORT=18381
HAPROXY_RR_PORT=18382
HAPROXY_LC_PORT=18383
LEVEE_PORT=18384
LEVEE_ADMIN_PORT=18394
NB=4
BPORTS=()
for ((i=0; i<NB; i++)); do BPORTS+=($((BACKEND_PORT + i))); done

bench_init levee-dist
bench_need_tools wrk nginx haproxy curl
NGINX_BIN=$(command -v nginx)
HAPROXY_BIN=$(command -v haproxy)
bench_pinning "proxies on CPU $PROXY_CPU, backends + wrk on CPU $LOAD_CPU"

# ---------------------------------------------------------------- helpers
# counts — the four backends' /__count values, space-separated ("x" if one does not answer)
counts() {
  local p c vals=()
  for p in "${BPORTS[@]}"; do
    c=$(curl -s -m 2 "http://127.0.0.1:$p/__count" 2>/dev/null || true)
    [[ $c =~ ^[0-9]+$ ]] || c=x
    vals+=("$c")
  done
  echo "${vals[*]}"
}

# cpu_idle_pct SECONDS — share of all CPUs idle over a short sample (/proc/stat)
cpu_idle_pct() {
  local a b
  a=$(awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat)
  sleep "$1"
  b=$(awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN{ split(a,x," "); split(b,y," "); t=y[1]-x[1]; printf "%.0f\n", (t>0 ? 100*(y[2]-x[2])/t : 0) }'
}

# ---------------------------------------------------------------- ports + builds
check_ports backends "${BPORTS[@]}" "$NGINX_RR_PORT" "$NGINX_LC_PORT" "$HAPROXY_RR_PORT" "$HAPROXY_LC_PORT" "$LEVEE_PORT" "$LEVEE_ADMIN_PORT"

log "building bench/backend"
build_bench backend
[[ $("$tmp/backend" -h 2>&1 || true) == *-count* ]] || die "bench/backend has no -count flag"

LEVEE_OK=0
build_levee && LEVEE_OK=1

# ---------------------------------------------------------------- configs (the same for both scenarios)
backends_yaml=""
for p in "${BPORTS[@]}"; do backends_yaml+="127.0.0.1:$p, "; done
backends_yaml="[${backends_yaml%, }]"
cat >"$tmp/levee.yaml" <<EOF
listen: 127.0.0.1:$LEVEE_PORT
admin: 127.0.0.1:$LEVEE_ADMIN_PORT
apps:
  p2c:
    hosts: [p2c.local]
    backends: $backends_yaml
    balance: p2c
    limits:
      concurrency: 4096
      queue: {max_wait: 1s, max_len: 4096}
  rr:
    hosts: [rr.local]
    backends: $backends_yaml
    balance: round_robin
    limits:
      concurrency: 4096
      queue: {max_wait: 1s, max_len: 4096}
EOF

nginx_servers=""; haproxy_servers=""
for ((i=0; i<NB; i++)); do
  nginx_servers+="    server 127.0.0.1:${BPORTS[i]};"$'\n'
  haproxy_servers+="  server b$((i+1)) 127.0.0.1:${BPORTS[i]}"$'\n'
done
mkdir -p "$tmp/nginx/logs"
{
  nginx_conf_head warn 4096
  cat <<EOF
  upstream be_rr {
$nginx_servers    keepalive 64;
    keepalive_requests 1000000;
  }
  upstream be_lc {
    least_conn;
$nginx_servers    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$NGINX_RR_PORT;
    location / { proxy_pass http://be_rr; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
  server {
    listen 127.0.0.1:$NGINX_LC_PORT;
    location / { proxy_pass http://be_lc; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOF
} >"$tmp/nginx.conf"

{
  haproxy_cfg_head
  cat <<EOF
frontend fe_rr
  bind 127.0.0.1:$HAPROXY_RR_PORT
  default_backend be_rr
frontend fe_lc
  bind 127.0.0.1:$HAPROXY_LC_PORT
  default_backend be_lc
backend be_rr
  balance roundrobin
$haproxy_servers
backend be_lc
  balance leastconn
$haproxy_servers
EOF
} >"$tmp/haproxy.cfg"

nginx_check || { cat "$tmp/nginx-t.log" >&2; die "nginx config test failed"; }
haproxy_check || { cat "$tmp/haproxy-c.log" >&2; die "haproxy config check failed"; }

ALL_TARGETS=(levee-p2c levee-rr nginx-rr nginx-lc haproxy-rr haproxy-lc)
declare -A URL HOSTHDR NOTE
URL[levee-p2c]="http://127.0.0.1:$LEVEE_PORT/";      HOSTHDR[levee-p2c]="p2c.local"
URL[levee-rr]="http://127.0.0.1:$LEVEE_PORT/";       HOSTHDR[levee-rr]="rr.local"
URL[nginx-rr]="http://127.0.0.1:$NGINX_RR_PORT/";    HOSTHDR[nginx-rr]=""
URL[nginx-lc]="http://127.0.0.1:$NGINX_LC_PORT/";    HOSTHDR[nginx-lc]=""
URL[haproxy-rr]="http://127.0.0.1:$HAPROXY_RR_PORT/"; HOSTHDR[haproxy-rr]=""
URL[haproxy-lc]="http://127.0.0.1:$HAPROXY_LC_PORT/"; HOSTHDR[haproxy-lc]=""
declare -A APP=([levee-p2c]=p2c [levee-rr]=rr)

# start_scenario B1_DELAY OTHERS_DELAY — start the 4 backends and the 3 proxies; sets READY[target]
declare -A READY
start_scenario() {
  local d1=$1 dn=$2 i d t
  READY=()
  for ((i=0; i<NB; i++)); do
    d=$dn; ((i == 0)) && d=$d1
    GOMAXPROCS=1 "${ON_LOAD_CPU[@]}" "$tmp/backend" -count -delay "$d" -listen "127.0.0.1:${BPORTS[i]}" >"$tmp/backend$((i+1)).log" 2>&1 &
    PIDS+=($!)
  done
  for p in "${BPORTS[@]}"; do
    wait_http "http://127.0.0.1:$p/__count" 10 || { cat "$tmp"/backend*.log >&2; die "backend :$p not ready"; }
  done
  nginx_start
  haproxy_start
  if ((LEVEE_OK)); then
    GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee" serve --config "$tmp/levee.yaml" >"$tmp/levee.log" 2>&1 &
    LEVEE_PID=$!; PIDS+=("$LEVEE_PID")
    wait_http "http://127.0.0.1:$LEVEE_ADMIN_PORT/readyz" 10 || true
  fi
  for t in "${ALL_TARGETS[@]}"; do
    if [[ $t == levee-* ]] && ((!LEVEE_OK)); then NOTE[$t]="skipped: does not build"; continue; fi
    local -a hdr=()
    [[ -n ${HOSTHDR[$t]} ]] && hdr=(-H "Host: ${HOSTHDR[$t]}")
    if wait_http "${URL[$t]}" 10 "${hdr[@]}"; then READY[$t]=1
    else
      NOTE[$t]="skipped: not ready"; log "$t not ready"
      case $t in
        levee-*) tail -10 "$tmp/levee.log" >&2 || true ;;
        nginx-*) tail -10 "$tmp/nginx/logs/error.log" "$tmp/nginx.out" >&2 || true ;;
        haproxy-*) tail -10 "$tmp/haproxy.out" >&2 || true ;;
      esac
    fi
  done
}

# parse_wrk FILE -> "rps requests errors"
parse_wrk() {
  awk '
    /^Requests\/sec:/            { rps=$2 }
    / requests in /              { reqs=$1 }
    /Non-2xx or 3xx responses:/  { err+=$NF }
    /Socket errors:/             { for(i=1;i<=NF;i++) if($i ~ /^[0-9]+,?$/) { v=$i; sub(/,/,"",v); err+=v } }
    END { printf "%s %s %d\n", rps+0, reqs+0, err }' "$1"
}

# levee_imbalance APP — levee_backend_imbalance{app="APP"} from levee's /metrics ("" if absent)
levee_imbalance() {
  curl -s -m 2 "http://127.0.0.1:$LEVEE_ADMIN_PORT/metrics" 2>/dev/null \
    | awk -v app="$1" '$1 == "levee_backend_imbalance{app=\"" app "\"}" { printf "%.3f\n", $2 }' || true
}

# ---------------------------------------------------------------- runs
IDLE_BEFORE=$(cpu_idle_pct 1)
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
log "before the runs: ${IDLE_BEFORE}% CPU idle, load average $LOADAVG"

table="$tmp/table.md"
{
  echo "| target | scenario | req/s | max/mean | b1 share (slow in B) | shares b1 / b2 / b3 / b4 | errors | levee's own imbalance |"
  echo "|---|---|---:|---:|---:|---|---:|---:|"
} >"$table"
LEVEE_RAN=0

for sc in A B; do
  if [[ $sc == A ]]; then d1=$FAST_DELAY; sc_label="A: 4 x $FAST_DELAY"
  else d1=$SLOW_DELAY; sc_label="B: b1 $SLOW_DELAY, 3 x $FAST_DELAY"; fi
  log "scenario $sc_label: starting backends and proxies"
  start_scenario "$d1" "$FAST_DELAY"
  for t in "${ALL_TARGETS[@]}"; do
    if [[ -z ${READY[$t]:-} ]]; then
      echo "| $t | $sc_label | ${NOTE[$t]:-skipped} | | | | | |" >>"$table"; continue
    fi
    run_wrk "$t" "$WARMUP" "$tmp/warm-$sc-$t.txt" || true
    c0=$(counts)
    if ! run_wrk "$t" "$DURATION" "$tmp/wrk-$sc-$t.txt"; then
      echo "| $t | $sc_label | wrk failed | | | | | |" >>"$table"; continue
    fi
    c1=$(counts)
    read -r rps reqs errs < <(parse_wrk "$tmp/wrk-$sc-$t.txt")
    own="—"
    if [[ $t == levee-* ]]; then
      LEVEE_RAN=1
      v=$(levee_imbalance "${APP[$t]}"); [[ -n $v ]] && own=$v
    fi
    # shares from the count deltas; max/mean = max share x N
    row=$(awk -v a="$c0" -v b="$c1" -v n="$NB" 'BEGIN{
      na=split(a,x," "); nb=split(b,y," ")
      for(i=1;i<=n;i++){ if(x[i]=="x"||y[i]=="x"){ print "ERR"; exit } d[i]=y[i]-x[i]; s+=d[i] }
      if(s<=0){ print "ERR"; exit }
      for(i=1;i<=n;i++){ sh=d[i]/s; if(sh>m) m=sh; l=l (i>1?" / ":"") sprintf("%.1f%%", 100*sh) }
      printf "%.2f|%.1f%%|%s|%d\n", m*n, 100*d[1]/s, l, s }')
    if [[ $row == ERR ]]; then
      echo "| $t | $sc_label | $(printf '%.0f' "$rps") | counts unreadable | | | $errs | $own |" >>"$table"
      log "$sc $t: backend counts unreadable ($c0 -> $c1)"; continue
    fi
    IFS='|' read -r mm b1 shares served <<<"$row"
    echo "| $t | $sc_label | $(printf '%.0f' "$rps") | $mm | $b1 | $shares | $errs | $own |" >>"$table"
    log "$sc $t: $rps req/s, wrk $reqs requests, backends served $served, max/mean $mm, b1 $b1 ($shares), errors $errs, levee's own $own"
  done
  stop_all
done

# ---------------------------------------------------------------- output
bench_versions
CMD="DURATION=$DURATION bash bench/distribution.sh"
((WRITE)) && CMD+=" --write"
PIN_TXT=$( ((PINNED)) && echo "proxies on CPU $PROXY_CPU, the 4 backends (GOMAXPROCS=1 each) + wrk on CPU $LOAD_CPU" || echo none)

{
  echo "Distribution over 4 backends — wrk -t1 -c$CONNS -d$DURATION per target and scenario ($WARMUP warm-up, not counted)"
  echo "machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}; ${IDLE_BEFORE}% idle before, load average $LOADAVG; pinning: $PIN_TXT"
  echo "versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER"
  echo
  cat "$table"
}

if ((WRITE)); then
  if ((!LEVEE_RAN)); then
    log "--write: levee did not run, docs/benchmarks.md left unchanged"
  else
    {
      echo "## Distribution over 4 backends: levee vs nginx vs haproxy (bench/distribution.sh)"
      echo
      echo "- command: \`$CMD\`"
      echo "- date: $DATE"
      echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr); ${IDLE_BEFORE}% CPU idle just before the runs, load average $LOADAVG"
      echo "- load: wrk -t1 -c$CONNS -d$DURATION per target and scenario after a $WARMUP warm-up; shares are each backend's count of answered requests over the timed run (\`bench/backend -count\`, read from \`/__count\` before and after)"
      echo "- backends: 4 × \`bench/backend\` (GOMAXPROCS=1 each); scenario A: all four \`-delay $FAST_DELAY\`; scenario B: b1 \`-delay $SLOW_DELAY\`, b2–b4 \`-delay $FAST_DELAY\`"
      echo "- targets: levee (GOMAXPROCS=1, one plain listener as a new user writes it: HTTP/1.1 on the event loops, one process, app \`p2c\` with \`balance: p2c\` and app \`rr\` with \`balance: round_robin\`, by Host); nginx (worker_processes 1) upstream round robin and \`least_conn\`; haproxy (nbthread 1) \`balance roundrobin\` and \`balance leastconn\`; keep-alive to the backends everywhere (nginx \`keepalive 64\` + HTTP/1.1, haproxy \`http-reuse always\`); pinning: $PIN_TXT"
      echo "- versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER"
      echo
      cat "$table"
      echo
      echo "max/mean is the largest backend share over the mean share (25%): 1.00 is perfectly even. In scenario A every policy should be near 1.00. In scenario B a policy blind to latency (round robin) still gives the slow b1 25%, and every client connection waits on it in turn; a load-aware one (p2c, least-conn) sends it less, so max/mean > 1 there is intended and b1's share is the figure to read. \"levee's own imbalance\" is \`levee_backend_imbalance{app}\` from levee's /metrics right after the run (max/mean over levee's last minute, which includes the warm-up), as a cross-check of the backends' counts."
      echo
      echo "req/s are noisy: the proxy has one core, the four backends and wrk share the other, and the machine may have been running other work (see the idle share above); compare proxies' throughput with bench/proxy.sh instead. The shares do not depend on that noise (they are counts at the backends), apart from how much slower b1 really is when CPU 1 is contended."
    } >"$tmp/section-body.md"
    # first time: right after the "load-balancing gate" section if there is one, else at the end
    write_doc_section "$tmp/section-body.md" '^## The load-balancing gate'
  fi
fi
