#!/usr/bin/env bash
# bench/matrix.sh — levee beside nginx and haproxy at every operating point, as ratios.
#
# Usage:  bash bench/matrix.sh [--write]
#   --write   also replace the "matrix.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   DURATION [5s]   load per point and peer       WARMUP [2s]  a warm-up round (at least 2s)
#   ROUNDS [3]      rounds per point: the peers in turn, round after round; each figure is the
#                   median of its rounds, each ratio the median of the rounds' own ratios
#   WARMUP_ROUNDS [5]  warm-up rounds at most: they repeat until one opens no backend connection
#   CONNS [64 256 1024]  client connections       PROTOS [h1 h1tls h2tls]
#   PINS [alone shared]  alone: the proxy alone on CPU 0, backend + load on CPU 1;
#                        shared: proxy and backend on CPU 0, load alone on CPU 1
#   BACKEND_PORT [9101]   PORT_BASE [18080]: nginx on it (TLS +100), haproxy +1, levee +2, admin +12
#   OVERLOAD_CONNS [512 4000]  the open-loop overload's connections ("" skips it)
#   OVERLOAD_DURATION [5s]     per overload run   OVERLOAD_ROUNDS [3]  its rounds (medians)
#   H2C [1]   1: with HTTP/1.1 clients, also load a second levee (PORT_BASE+3, admin +13) whose leg
#             to the same backend is h2c (bench/backend -h2c), compared with levee's own HTTP/1.1
#             leg at the same point, by CPU per request (issue 21: at most 1.2x)
#   LEVEE_SERVER [none]  a server: block (YAML flow) for levee's config, e.g. '{event_loop: false}'
#             (the overload's levee takes it too: lib.sh's start_levee)
#
# The points: protocol (HTTP/1.1, HTTP/1.1 over TLS, h2 over TLS) × client connections × pinning.
# At each, the same backend (bench/backend, 100-byte answers, GOMAXPROCS=1) is loaded through levee,
# nginx and haproxy in turn, each with one worker thread and a config as its users write it:
#   levee    the config a new user writes: one plain and one TLS listener, default limits
#   nginx    worker_processes 1, upstream keepalive 1024 over HTTP/1.1, listen ssl http2
#   haproxy  nbthread 1, http-reuse always, bind ssl alpn h2,http/1.1
# Load: wrk -t1 for HTTP/1.1 (plain and TLS), h2load -t1 -m1 for h2 (one stream at a time per
# connection, so N connections are N requests in flight, as with wrk). One ECDSA P-256 certificate.
# Figures per point and peer: 2xx responses/s (a refusal is not throughput: levee's default limits
# refuse at 1,024 connections on one core, nginx's config has none), proxy CPU µs per answered
# request, of any status (utime+stime of the proxy from
# /proc, over the run), p99 (wrk's; h2load's from its per-request log), and backend dials per 1,000
# requests (connections the backend accepted from 1 s into the run to its end, from its /__conns,
# ÷ the requests of that window × 1,000). DURATION must be at least 2s.
# Then the open-loop overload (bench/overload.sh, HTTP/1.1): 3x and 10x a backend of 32 slots × 5 ms,
# with OVERLOAD_CONNS connections, the proxy sharing the backend's core; its figures are goodput
# (2xx within 1 s per second) and the served p99, as ratios to nginx and haproxy in the same run.
# The table gives levee ÷ nginx and levee ÷ haproxy; the summary the WORST ratio over all points
# (the lowest throughput or goodput ratio, the highest CPU or p99 ratio), never the best. Run it
# alone on the machine.
# Rounds: this host's speed swings by a third from one minute to the next, so one run per peer and
# point compares the minutes, not the proxies (nginx once read 13,488 req/s at a point where
# haproxy read 28,487 a few seconds later). Each point runs ROUNDS rounds of every peer in turn
# (the warm-up in the first only: the pools stay warm), and a ratio is the median of the rounds'
# ratios, each taken between runs seconds apart.
# Runtime at defaults: 2 pinnings × 3 protocols × 3 sizes × 3 rounds × 3 peers × 6 s ≈ 17 min, the
# h2c leg's 2 × 3 × 3 × 6 s, plus the overload's 2 × 2 rates × 4 targets × 3 rounds × ~7 s ≈ 6 min,
# plus builds and warm-ups: about half an hour. One round of the overload is not a figure either: a
# single round gave 0.06 and 0.72 at one point an hour apart.
set -euo pipefail

BENCH_NAME=matrix.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 30 "$@"

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
WARMUP_ROUNDS=${WARMUP_ROUNDS:-5}
ROUNDS=${ROUNDS:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
(( $(to_secs "$DURATION") >= 2 && $(to_secs "$WARMUP") >= 2 )) || die "DURATION and WARMUP must be at least 2s (dials are counted from 1 s in)"
[[ $WARMUP_ROUNDS =~ ^[1-9][0-9]*$ ]] || die "WARMUP_ROUNDS must be a positive integer"
read -r -a CONN_LIST <<<"${CONNS:-64 256 1024}"
read -r -a PROTO_LIST <<<"${PROTOS:-h1 h1tls h2tls}"
read -r -a PIN_LIST <<<"${PINS:-alone shared}"
BACKEND_PORT=${BACKEND_PORT:-9101}
BASE=${PORT_BASE:-18080}
NGINX_PORT=$BASE; NGINX_TLS=$((BASE + 100))
HAPROXY_PORT=$((BASE + 1)); HAPROXY_TLS=$((BASE + 101))
LEVEE_PORT=$((BASE + 2)); LEVEE_TLS=$((BASE + 102)); LEVEE_ADMIN_PORT=$((BASE + 12))
PEERS=(levee nginx haproxy)
H2C=${H2C:-1}; LEVEE_H2C_PORT=$((BASE + 3)); LEVEE_H2C_ADMIN=$((BASE + 13))

bench_init levee-matrix
bench_need_tools wrk h2load nginx haproxy curl openssl
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
check_ports backend "$BACKEND_PORT" $NGINX_PORT $NGINX_TLS $HAPROXY_PORT $HAPROXY_TLS $LEVEE_PORT $LEVEE_TLS $LEVEE_ADMIN_PORT \
  $LEVEE_H2C_PORT $LEVEE_H2C_ADMIN

log "building bench/backend and levee"
build_bench backend
build_levee || die "levee does not build"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=bench.local -addext subjectAltName=DNS:bench.local,IP:127.0.0.1 \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" >/dev/null 2>&1 || die "openssl could not make a certificate"
cat "$tmp/cert.pem" "$tmp/key.pem" >"$tmp/both.pem"
NGINX_BIN=$(command -v nginx); HAPROXY_BIN=$(command -v haproxy)

# start_all — the backend, levee, nginx and haproxy pinned as PIN_MODE says; sets PID[...]
start_all() {
  bench_pinning "proxy on CPU $PROXY_CPU, backend + load on CPU $LOAD_CPU"
  local backend_flags=(-count)
  if ((H2C)); then backend_flags+=(-h2c); fi
  GOMAXPROCS=1 "${ON_BACKEND_CPU[@]}" "$tmp/backend" "${backend_flags[@]}" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
  PIDS+=("$!")
  wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || die "backend not ready"
  levee_bench_yaml "$tmp/levee.yaml" "$LEVEE_PORT" "$LEVEE_TLS" "$LEVEE_ADMIN_PORT" "${LEVEE_SERVER:-}"
  GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee" serve --config "$tmp/levee.yaml" >"$tmp/levee.log" 2>&1 &
  PID[levee]=$!; PIDS+=("${PID[levee]}")
  wait_http "http://127.0.0.1:$LEVEE_ADMIN_PORT/readyz" 10 || { tail "$tmp/levee.log" >&2; die "levee not ready"; }
  mkdir -p "$tmp/nginx/logs"
  {
    nginx_conf_head warn 8192 "worker_rlimit_nofile 65536;"
    nginx_proxy_block 1024 "$NGINX_PORT" "$NGINX_TLS"
  } >"$tmp/nginx.conf"
  nginx_check || { cat "$tmp/nginx-t.log" >&2; die "nginx config"; }
  nginx_start; PID[nginx]=${PIDS[-1]}
  {
    haproxy_cfg_head
    echo "frontend fe_bench"
    echo "  bind 127.0.0.1:$HAPROXY_PORT"
    echo "  bind 127.0.0.1:$HAPROXY_TLS ssl crt $tmp/both.pem alpn h2,http/1.1"
    echo "  default_backend be_bench"
    echo "backend be_bench"
    echo "  server b1 127.0.0.1:$BACKEND_PORT"
  } >"$tmp/haproxy.cfg"
  haproxy_check || { cat "$tmp/haproxy-c.log" >&2; die "haproxy config"; }
  haproxy_start; PID[haproxy]=${PIDS[-1]}
  wait_http "http://127.0.0.1:$NGINX_PORT/" 10 || die "nginx not ready"
  wait_http "http://127.0.0.1:$HAPROXY_PORT/" 10 || die "haproxy not ready"
  wait_http "https://127.0.0.1:$LEVEE_TLS/" 10 -k -H 'Host: bench.local' || die "levee TLS not ready"
  if ((H2C)); then start_levee_h2c; fi
}

# start_levee_h2c — the second levee, pinned as the first: its one app's leg to the backend is
# h2c, all else levee's defaults as in the first; sets PID[levee-h2c]
start_levee_h2c() {
  cat >"$tmp/levee-h2c.yaml" <<EOF
listen: [127.0.0.1:$LEVEE_H2C_PORT]
admin: {addr: 127.0.0.1:$LEVEE_H2C_ADMIN}
apps:
  bench:
    hosts: [bench.local]
    backends: [127.0.0.1:$BACKEND_PORT]
    upstream: {protocol: h2c}
EOF
  GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee" serve --config "$tmp/levee-h2c.yaml" >"$tmp/levee-h2c.log" 2>&1 &
  PID[levee-h2c]=$!; PIDS+=("${PID[levee-h2c]}")
  wait_http "http://127.0.0.1:$LEVEE_H2C_ADMIN/readyz" 10 || { tail "$tmp/levee-h2c.log" >&2; die "levee (h2c leg) not ready"; }
  wait_http "http://127.0.0.1:$LEVEE_H2C_PORT/" 10 -H 'Host: bench.local' || die "levee (h2c leg) does not reach the backend"
}

# url PEER PROTO — where the load goes
url() {
  local scheme=http port
  [[ $2 != h1 ]] && scheme=https
  case $1/$2 in
    levee/h1) port=$LEVEE_PORT ;; levee/*) port=$LEVEE_TLS ;; levee-h2c/h1) port=$LEVEE_H2C_PORT ;;
    nginx/h1) port=$NGINX_PORT ;; nginx/*) port=$NGINX_TLS ;;
    haproxy/h1) port=$HAPROXY_PORT ;; haproxy/*) port=$HAPROXY_TLS ;;
  esac
  echo "$scheme://127.0.0.1:$port/"
}

backend_conns() { curl -s -m 2 "http://127.0.0.1:$BACKEND_PORT/__conns" || echo 0; }

# warm_up PEER PROTO CONNS OUT — load until steady: rounds of WARMUP, until one opens no backend
# connection from 1 s into it to its end (the window the run's dials are counted in), at most
# WARMUP_ROUNDS. At 1,024 TLS connections on a shared core the handshakes alone take seconds, and
# the in-flight requests, so the proxies' backend connections, grow for as long: one short warm-up
# left that growth to the measured run, where it read as 14 dials per 1,000 requests for levee
# and nginx alike.
warm_up() {
  local peer=$1 proto=$2 n=$3 out=$4 i b0 b1 pid
  for ((i = 1; i <= WARMUP_ROUNDS; i++)); do
    load "$peer" "$proto" "$n" "$WARMUP" "$out" >/dev/null &
    pid=$!
    sleep 1; b0=$(backend_conns)
    wait "$pid" || true
    b1=$(backend_conns)
    if ((b1 - b0 - 1 <= 0)); then return 0; fi
  done
  log "$peer $proto $n: still dialling after $WARMUP_ROUNDS warm-up rounds of $WARMUP ($((b1 - b0 - 1)) in the last)"
}

# load PEER PROTO CONNS DURATION OUT — run the load; prints "ok p99_ms errors answered": ok are
# the 2xx answers (a proxy's refusals are not throughput), answered every response, of any status
load() {
  local peer=$1 proto=$2 n=$3 d=$4 out=$5 limit
  limit=$(( $(to_secs "$d") + 30 ))
  if [[ $proto == h2tls ]]; then
    "${ON_LOAD_CPU[@]}" timeout -k 5 "$limit" h2load -t1 -c"$n" -m1 -D "$(to_secs "$d")" \
      -H ':authority: bench.local' --log-file="$out.log" "$(url "$peer" "$proto")" >"$out" 2>&1 || true
    awk '/^status codes:/ { ok=$3 } END { printf "%d ", ok+0 }' "$out"
    # h2load's log: start time, status, latency (µs) per request
    if [[ -s $out.log ]]; then
      awk '{print $3}' "$out.log" | sort -n | awk '{a[NR]=$1} END { i=int(NR*0.99); if(i<1)i=1; printf "%.3f ", a[i]/1000 }'
    else
      printf "nan "
    fi
    awk '/^requests:/ { done=$6 } /^status codes:/ { ok=$3 } END { printf "%d %d\n", done-ok, done+0 }' "$out"
  else
    "${ON_LOAD_CPU[@]}" timeout -k 5 "$limit" wrk -t1 -c"$n" -d"$d" --latency -H 'Host: bench.local' \
      "$(url "$peer" "$proto")" >"$out" 2>&1 || true
    awk '
      function ms(v,   x,u){ x=v+0; u=v; sub(/^[0-9.]+/,"",u)
        if(u=="us") return x/1000; if(u=="ms") return x; if(u=="s") return x*1000; return x }
      / requests in /              { reqs=$1 }
      /^ +99%/                     { p99=ms($2) }
      /Non-2xx or 3xx responses:/  { err+=$NF; non2xx=$NF }
      /Socket errors:/             { for(i=1;i<=NF;i++) if($i ~ /^[0-9]+,?$/) { v=$i; sub(/,/,"",v); err+=v } }
      END { printf "%d %.3f %d %d\n", reqs-non2xx, p99+0, err, reqs+0 }' "$out"
  fi
}

CLK_TCK=$(getconf CLK_TCK)
declare -A PID
results="$tmp/results.tsv"   # pin proto conns peer rps cpu_us p99 dials_per_k errors cpu_use round
: >"$results"
for pin in "${PIN_LIST[@]}"; do
  PIN_MODE=$pin
  start_all
  for proto in "${PROTO_LIST[@]}"; do
    for n in "${CONN_LIST[@]}"; do
      # levee's h2c leg runs right after its HTTP/1.1 leg: the two are compared with each other,
      # and this host's speed drifts over the seconds the peers' runs between them would take.
      peers=()
      for peer in "${PEERS[@]}"; do
        peers+=("$peer")
        if ((H2C)) && [[ $proto == h1 && $peer == levee ]]; then peers+=(levee-h2c); fi
      done
      for ((round = 1; round <= ROUNDS; round++)); do
      for peer in "${peers[@]}"; do
        out="$tmp/$pin-$proto-$n-$peer-$round"
        ((round > 1)) || warm_up "$peer" "$proto" "$n" "$out.warm"
        c0=$(cpu_ticks "${PID[$peer]}")
        t0=$(date +%s.%N)
        load "$peer" "$proto" "$n" "$DURATION" "$out" >"$out.sum" &
        LOAD_PID=$!
        # Dials are counted from 1 s into the run: a run's end closes client connections with
        # requests in flight, whose backend connections then close too (levee's h2 engine aborts
        # the exchange; an HTTP/1.1 proxy may not), and are dialled again at the next run's start.
        sleep 1; b0=$(backend_conns)
        wait "$LOAD_PID" || true; LOAD_PID=""
        b1=$(backend_conns)
        t1=$(date +%s.%N)
        c1=$(cpu_ticks "${PID[$peer]}")
        read -r reqs p99 errs answered <"$out.sum"
        awk -v pin="$pin" -v proto="$proto" -v n="$n" -v peer="$peer" -v reqs="$reqs" -v p99="$p99" \
            -v errs="$errs" -v answered="${answered:-0}" -v dc=$((c1 - c0)) -v hz="$CLK_TCK" -v db=$((b1 - b0 - 1)) -v t0="$t0" -v t1="$t1" \
            -v d="$(to_secs "$DURATION")" -v round="$round" 'BEGIN {
          if (db < 0) db = 0
          counted = answered * (d - 1) / d  # the requests of the window dials are counted in
          # cpu_use: the share of a core the proxy used over the run
          if (reqs > 0) printf "%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\t%.2f\t%d\t%.2f\t%d\n", pin, proto, n, peer, reqs/(t1-t0), dc/hz*1e6/answered, p99, db*1000/counted, errs, dc/hz/(t1-t0), round
          else printf "%s\t%s\t%s\t%s\tnan\tnan\tnan\tnan\t%d\tnan\t%d\n", pin, proto, n, peer, errs, round }' >>"$results"
        log "$(tail -1 "$results")"
      done
      done
    done
  done
  stop_all
done

# The overload, a run of overload.sh per connection count (its own ports and processes); its
# "levee ÷ peer" lines become rows here.
read -r -a OVERLOAD_LIST <<<"${OVERLOAD_CONNS-512 4000}"
overload="$tmp/overload.tsv"   # conns rate peer goodput_ratio p99_ratio cpu_ratio
: >"$overload"
for n in "${OVERLOAD_LIST[@]}"; do
  log "overload: bench/overload.sh at 3x and 10x with $n connections, the proxy sharing the backend's core"
  if ! PIN_MODE=shared CONNS=$n BASE_RATE=0 CAL_DURATION=0 IDLE_WAIT=0 ROUNDS="${OVERLOAD_ROUNDS:-3}" DURATION="${OVERLOAD_DURATION:-5s}" \
      bash "$(dirname "$0")/overload.sh" >"$tmp/overload-$n.md" 2>"$tmp/overload-$n.err"; then
    log "overload.sh with $n connections failed:"; tail -5 "$tmp/overload-$n.err" >&2; continue
  fi
  # "- at 19200/s, levee ÷ nginx (same run): goodput 0.95, served p99 1.30, proxy CPU 1.10"
  awk -v n="$n" '/^- at [0-9]+\/s, levee ÷ / {
      rate=$3; sub(/\/s,/, "", rate); peer=$6
      g=$10; sub(/,/, "", g); p=$13; sub(/,/, "", p); c=$16
      printf "%s\t%s\t%s\t%s\t%s\t%s\n", n, rate, peer, g, p, c }' "$tmp/overload-$n.md" >>"$overload"
done

bench_versions
H2LOAD_VER=$(h2load --version 2>&1 | awk 'NR==1{print $2}')
table="$tmp/table.md"
# Medians over a point's rounds: each figure of a peer, and each ratio of the rounds' own ratios
# (the peers' runs of one round are seconds apart). med() takes a space-separated list; "nan"
# and empty entries are skipped.
MEDIAN_AWK='
  function med(list,   x, a, m, c, i, j, t) {
    m = split(list, x, " "); c = 0
    for (i = 1; i <= m; i++) if (x[i] != "nan" && x[i] != "") a[++c] = x[i] + 0
    if (c == 0) return "nan"
    for (i = 2; i <= c; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
  }
  function fmt(v, f) { return v == "nan" ? "nan" : sprintf(f, v) }
  # ratios(k, a, b, field): the median over k'"'"'s rounds of field a ÷ field b, "n/a" without one
  function ratios(k, a, b, field,   r, l, x, y) {
    l = ""
    for (r = 1; r <= rounds[k]; r++) { x = field[k, r, a]; y = field[k, r, b]
      if (x != "" && y != "" && x != "nan" && y != "nan" && y + 0 != 0) l = l " " (x / y) }
    x = med(l)
    return x == "nan" ? "n/a" : sprintf("%.2f", x)
  }'
awk -F'\t' "$MEDIAN_AWK"'
  { k=$1 FS $2 FS $3; if (!(k in seen)) { seen[k]=1; order[++n]=k }
    if ($11 + 0 > rounds[k]) rounds[k] = $11 + 0
    rps[k,$4]=rps[k,$4] " " $5; cpu[k,$4]=cpu[k,$4] " " $6; p99[k,$4]=p99[k,$4] " " $7; dials[k,$4]=dials[k,$4] " " $8
    err[k,$4]+=$9; R[k,$11,$4]=$5; C[k,$11,$4]=$6 }
  function m(v, f) { return fmt(med(v), f) }
  END {
    print "| pinning | protocol | conns | req/s levee / nginx / haproxy | levee ÷ nginx | levee ÷ haproxy | CPU µs/req levee / nginx / haproxy | CPU levee ÷ nginx | p99 ms levee / nginx / haproxy | dials per 1,000 req levee / nginx / haproxy | errors |"
    print "|---|---|---:|---|---:|---:|---|---:|---|---|---:|"
    worst_rps=1e9; worst_cpu=0
    for (i=1; i<=n; i++) { k=order[i]
      split(k, f, FS)
      rn=ratios(k, "levee", "nginx", R); rh=ratios(k, "levee", "haproxy", R); cn=ratios(k, "levee", "nginx", C)
      if (rn != "n/a" && rn+0 < worst_rps) { worst_rps=rn+0; wr=k }
      if (rh != "n/a" && rh+0 < worst_rps) { worst_rps=rh+0; wr=k " (haproxy)" }
      if (cn != "n/a" && cn+0 > worst_cpu) { worst_cpu=cn+0; wc=k }
      printf "| %s | %s | %s | %s / %s / %s | %s | %s | %s / %s / %s | %s | %s / %s / %s | %s / %s / %s | %d |\n", f[1], f[2], f[3],
        m(rps[k,"levee"], "%.0f"), m(rps[k,"nginx"], "%.0f"), m(rps[k,"haproxy"], "%.0f"), rn, rh,
        m(cpu[k,"levee"], "%.1f"), m(cpu[k,"nginx"], "%.1f"), m(cpu[k,"haproxy"], "%.1f"), cn,
        m(p99[k,"levee"], "%.3f"), m(p99[k,"nginx"], "%.3f"), m(p99[k,"haproxy"], "%.3f"),
        m(dials[k,"levee"], "%.2f"), m(dials[k,"nginx"], "%.2f"), m(dials[k,"haproxy"], "%.2f"),
        err[k,"levee"]+err[k,"nginx"]+err[k,"haproxy"]
    }
    gsub(FS, " ", wr); gsub(FS, " ", wc)
    printf "\n- worst throughput ratio: **%.2f** (%s)\n- worst CPU per request ratio (levee ÷ nginx): **%.2f** (%s)\n", worst_rps, wr, worst_cpu, wc
  }' "$results" >"$table"
# levee's h2c leg beside its HTTP/1.1 leg: the same HTTP/1.1 clients, the same backend
if grep -q $'\tlevee-h2c\t' "$results"; then
  awk -F'\t' "$MEDIAN_AWK"'
    $2 == "h1" && ($4 == "levee" || $4 == "levee-h2c") { k=$1 FS $3; if (!(k in seen)) { seen[k]=1; order[++n]=k }
      if ($11 + 0 > rounds[k]) rounds[k] = $11 + 0
      rps[k,$4]=rps[k,$4] " " $5; cpu[k,$4]=cpu[k,$4] " " $6; p99[k,$4]=p99[k,$4] " " $7; dials[k,$4]=dials[k,$4] " " $8
      err[k,$4]+=$9; use[k,$4]=use[k,$4] " " $10; C[k,$11,$4]=$6 }
    function m(v, f) { return fmt(med(v), f) }
    END {
      print ""
      print "levee'"'"'s leg to the backend, h2c beside HTTP/1.1 (HTTP/1.1 clients, the same backend; issue 21: CPU at most 1.2x):"
      print ""
      print "| pinning | conns | req/s h2c leg / HTTP/1.1 leg | CPU µs/req h2c leg / HTTP/1.1 leg | CPU h2c ÷ HTTP/1.1 | levee'"'"'s CPU use h2c / HTTP/1.1 | p99 ms h2c / HTTP/1.1 | dials per 1,000 req h2c / HTTP/1.1 | errors h2c / HTTP/1.1 |"
      print "|---|---:|---|---|---:|---|---|---|---|"
      worst=0
      for (i=1; i<=n; i++) { k=order[i]; split(k, f, FS); c=ratios(k, "levee-h2c", "levee", C)
        if (c != "n/a" && c+0 > worst) { worst=c+0; w=f[1] " " f[2] " conns" }
        printf "| %s | %s | %s / %s | %s / %s | %s | %s / %s | %s / %s | %s / %s | %d / %d |\n", f[1], f[2],
          m(rps[k,"levee-h2c"], "%.0f"), m(rps[k,"levee"], "%.0f"), m(cpu[k,"levee-h2c"], "%.1f"), m(cpu[k,"levee"], "%.1f"), c,
          m(use[k,"levee-h2c"], "%.2f"), m(use[k,"levee"], "%.2f"), m(p99[k,"levee-h2c"], "%.3f"), m(p99[k,"levee"], "%.3f"),
          m(dials[k,"levee-h2c"], "%.2f"), m(dials[k,"levee"], "%.2f"), err[k,"levee-h2c"], err[k,"levee"]
      }
      printf "\n- worst CPU per request, h2c leg ÷ HTTP/1.1 leg: **%.2f** (%s)\n", worst, w
      print "- levee'"'"'s CPU use is the share of its core it used over the run: a leg that is not saturated"
      print "  (its backend, not levee, is the bottleneck) pays its wake-ups over fewer requests."
    }' "$results" >>"$table"
fi
if [[ -s $overload ]]; then
  awk -F'\t' '
    { k=$1 FS $2; if (!(k in seen)) { seen[k]=1; order[++n]=k } g[k,$3]=$4; p[k,$3]=$5; c[k,$3]=$6 }
    END {
      print ""
      print "Open-loop overload (bench/overload.sh, HTTP/1.1, proxy sharing the backend'"'"'s core; backend 32 × 5 ms = 6,400 req/s):"
      print ""
      print "| conns | offered req/s | goodput levee ÷ nginx / ÷ haproxy | served p99 levee ÷ nginx / ÷ haproxy | proxy CPU levee ÷ nginx / ÷ haproxy |"
      print "|---:|---:|---|---|---|"
      worst_g=1e9; worst_p=0
      for (i=1; i<=n; i++) { k=order[i]; split(k, f, FS)
        printf "| %s | %s | %s / %s | %s / %s | %s / %s |\n", f[1], f[2], g[k,"nginx"], g[k,"haproxy"], p[k,"nginx"], p[k,"haproxy"], c[k,"nginx"], c[k,"haproxy"]
        split("nginx haproxy", peers, " ")
        for (j=1; j<=2; j++) { q=peers[j]
          if (g[k,q] != "n/a" && g[k,q] != "" && g[k,q]+0 < worst_g) { worst_g=g[k,q]+0; wg=f[1] " conns, " f[2] "/s, ÷ " q }
          if (p[k,q] != "n/a" && p[k,q] != "" && p[k,q]+0 > worst_p) { worst_p=p[k,q]+0; wp=f[1] " conns, " f[2] "/s, ÷ " q }
        }
      }
      printf "\n- worst overload goodput ratio: **%.2f** (%s)\n- worst overload served p99 ratio: **%.2f** (%s)\n", worst_g, wg, worst_p, wp
    }' "$overload" >>"$table"
fi

CMD="DURATION=$DURATION ROUNDS=$ROUNDS bash bench/matrix.sh"
{
  echo "Operating-point matrix — $ROUNDS rounds of $DURATION per point and peer (medians; ratios: medians of each round's) after warm-up rounds of $WARMUP until one opens no backend connection (at most $WARMUP_ROUNDS); wrk -t1 (HTTP/1.1), h2load -t1 -m1 (h2); 100-byte answers"
  echo "machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}; levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER, h2load $H2LOAD_VER"
  echo
  cat "$table"
}

if ((WRITE)); then
  {
    echo "## Every operating point (bench/matrix.sh)"
    echo
    echo "- command: \`$CMD --write\`"
    echo "- date: $DATE"
    echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr)"
    echo "- versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER, wrk $WRK_VER, h2load $H2LOAD_VER"
    echo "- setup: one worker thread per proxy; levee's config as a new user writes it (default limits), nginx upstream keepalive 1024, haproxy http-reuse always; ECDSA P-256 certificate; pinning alone: proxy on CPU 0, backend + load on CPU 1; shared: proxy + backend on CPU 0, load on CPU 1"
    echo "- figures: 2xx responses/s over the run (refusals are not counted as throughput); proxy CPU per answered request from /proc; p99 (h2load's from its per-request log); backend dials per 1,000 requests from the backend's accepted connections"
    echo "- rounds: $ROUNDS per point, the peers in turn; each figure is the median of its rounds, and each ratio the median of the rounds' own ratios (runs seconds apart), so that the host's swings from minute to minute fall out"
    echo
    cat "$table"
  } >"$tmp/section.body"
  write_doc_section "$tmp/section.body" '^# Benchmarks'
fi
