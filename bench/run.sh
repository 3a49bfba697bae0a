#!/usr/bin/env bash
# bench/run.sh — `levee drill all` against levee, nginx, haproxy and caddy, each with its best
# built-in protection, and one Markdown table of the drills' ratios.
#
# Usage:  bash bench/run.sh [--write]
#   --write   also replace the "run.sh" section of docs/benchmarks.md (only if levee ran)
# Environment (defaults in brackets):
#   DURATION [5s]   each drill's load phase        LIMIT [200]  the tenant's advertised limit, req/s
#   OFFERED  [10x]  tenant-limit's offered load    PIN [auto]   "0" disables taskset pinning
#   BACKEND_PORT [9161]  the app backend (bench/backend)
#   DRILL_PORT   [9171]  the distribution drill's 4 backends, DRILL_PORT .. DRILL_PORT+3
#   OVERLOAD_PORT [9181] the overload drill's backend: SLOTS [32] x SERVICE_TIME [20ms] = 1,600/s,
#                        offered OVERLOAD_OFFERED [3x] its capacity
#   SLOW_PORT    [9191]  the slow-clients drill's backend; SLOW_CONNS [1000] attack connections of
#                        each kind (slowloris, slow-body, slow-read), all at once
#   CARDS_DIR    [unset] keep each edge's report card (card-EDGE.json, .md) in this directory
# Missing nginx, haproxy, caddy or curl are installed with apt-get; a proxy that cannot be
# installed or started is skipped, and the table says so.
#
# Every edge serves the same hosts on 127.0.0.1:
#   tenant.local   the tenant with an advertised limit of LIMIT/s, GETs and JSON batches
#   other.local, hot.local, *.cold.local   unlimited neighbours (tenant-limit, cold-catalog)
#   dist.local     the 4 drill backends, least-loaded balancing (distribution)
#   over.local     the overload drill's backend of SLOTS slots, behind the edge's concurrency limit
#   slow.local     the slow-clients drill's backend, with each edge's defaults: no limit, and the
#                  client timeouts the product ships (levee's app default limits; nginx, haproxy
#                  and caddy a plain proxy block; haproxy's timeouts are bench/lib.sh's head)
# Best built-in protection per edge (what its docs offer without modules or scripts):
#   levee    limits {rate: LIMIT/s, batch: {json_field: uris, max: 1000}}, p2c balancing;
#            over.local limits {concurrency: SLOTS, queue: {max_wait: 10ms, max_len: 2 x SLOTS}}
#   nginx    limit_req (zone by $host, burst LIMIT/10, nodelay, 429 + Retry-After),
#            client_max_body_size 64k, upstream least_conn; over.local limit_conn SLOTS (503)
#   haproxy  stick-table http_req_rate(1s) by Host, deny 429 + Retry-After over LIMIT,
#            deny 413 over 64 KB Content-Length, balance leastconn; over.local server maxconn
#            SLOTS + timeout queue 10ms (503)
#   caddy    no built-in rate limit; request_body max_size 64KB, lb_policy least_conn;
#            over.local unhealthy_request_count SLOTS (a full upstream is unavailable: 503; max_fails 1
#            is the documented default, but caddy 2.6 leaves it 0 and then never selects the upstream)
# duplicate-instance is levee only (it starts a second levee on the same config).
# Pinning (taskset, >= 2 CPUs): proxies on CPU 0; backends and the drill on CPU 1.
# Runtime at defaults: 4 edges x 7 drills x ~5-10 s + starts and builds: ~4 min.
set -euo pipefail

BENCH_NAME=run.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 30 "$@"

DURATION=${DURATION:-5s}
LIMIT=${LIMIT:-200}
OFFERED=${OFFERED:-10x}
BACKEND_PORT=${BACKEND_PORT:-9161}
DRILL_PORT=${DRILL_PORT:-9171}
OVERLOAD_PORT=${OVERLOAD_PORT:-9181}
SLOTS=${SLOTS:-32}
SERVICE_TIME=${SERVICE_TIME:-20ms}
OVERLOAD_OFFERED=${OVERLOAD_OFFERED:-3x}
SLOW_PORT=${SLOW_PORT:-9191}
SLOW_CONNS=${SLOW_CONNS:-1000}
LEVEE_PORT=18480
LEVEE_ADMIN_PORT=18490
NGINX_PORT=18481
HAPROXY_PORT=18482
CADDY_PORT=18483
DPORTS=()
for ((i=0; i<4; i++)); do DPORTS+=($((DRILL_PORT + i))); done
BURST=$(( LIMIT / 10 > 0 ? LIMIT / 10 : 1 ))
[[ $SLOTS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: SLOTS must be a positive integer (got $SLOTS)" >&2; exit 2; }
[[ $SLOW_CONNS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: SLOW_CONNS must be a positive integer (got $SLOW_CONNS)" >&2; exit 2; }
QUEUE_LEN=$(( 2 * SLOTS ))
OVER="127.0.0.1:$OVERLOAD_PORT"
SLOW="127.0.0.1:$SLOW_PORT"

bench_init levee-run
bench_need_tools nginx haproxy curl
NGINX_BIN=$(command -v nginx)
HAPROXY_BIN=$(command -v haproxy)
declare -A NOTE=() URL=() CARD=()

# caddy is optional: a failed install skips it rather than the whole run
CADDY_BIN=$(command -v caddy || true)
if [[ -z $CADDY_BIN ]]; then
  log "installing caddy with apt-get"
  SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
  if { timeout 180 "${SUDO[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 300 "${SUDO[@]}" apt-get install -y -qq caddy; } >>"$tmp/apt.log" 2>&1; then
    CADDY_BIN=$(command -v caddy || true)
  fi
  [[ -n $CADDY_BIN ]] || { log "caddy could not be installed (see above); skipping it"; tail -5 "$tmp/apt.log" >&2 || true; NOTE[caddy]="skipped: could not be installed"; }
fi
# apt's caddy package starts a system service on :80; this script never uses it.

bench_pinning "proxies on CPU $PROXY_CPU, backends + drill on CPU $LOAD_CPU"
check_ports backends "$BACKEND_PORT" "${DPORTS[@]}" "$OVERLOAD_PORT" "$SLOW_PORT" "$LEVEE_PORT" "$LEVEE_ADMIN_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$CADDY_PORT"

build_bench backend
build_levee || die "levee does not build: nothing to compare"
DRILL="$tmp/levee"   # the drill generator is levee's own

GOMAXPROCS=1 "${ON_LOAD_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
PIDS+=("$!")
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || die "bench/backend did not start"
B="127.0.0.1:$BACKEND_PORT"
# edge_ready NAME PORT LOG — URL[NAME] once GET / with Host other.local answers 200; else NOTE[NAME]
edge_ready() {
  if wait_http "http://127.0.0.1:$2/" 10 -H 'Host: other.local'; then URL[$1]="http://127.0.0.1:$2"
  else log "$1 not ready:"; tail -10 "$3" >&2 || true; NOTE[$1]="skipped: not ready"; fi
}
dist_csv=$(printf '127.0.0.1:%s, ' "${DPORTS[@]}"); dist_csv=${dist_csv%, }

# ---------------------------------------------------------------- levee
cat >"$tmp/levee.yaml" <<EOF
listen: 127.0.0.1:$LEVEE_PORT
admin: 127.0.0.1:$LEVEE_ADMIN_PORT
apps:
  tenant:
    hosts: [tenant.local]
    backends: [$B]
    limits: {rate: $LIMIT/s, batch: {json_field: uris, max: 1000}}
  neighbours:
    hosts: [other.local, hot.local, "*.cold.local"]
    backends: [$B]
  dist:
    hosts: [dist.local]
    backends: [$dist_csv]
  overload:
    hosts: [over.local]
    backends: [$OVER]
    limits: {concurrency: $SLOTS, queue: {max_wait: 10ms, max_len: $QUEUE_LEN}}
  slow:
    hosts: [slow.local]
    backends: [$SLOW]
EOF
GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee" serve --config "$tmp/levee.yaml" >"$tmp/levee.log" 2>&1 &
PIDS+=("$!")
if wait_http "http://127.0.0.1:$LEVEE_ADMIN_PORT/readyz" 10; then
  URL[levee]="http://127.0.0.1:$LEVEE_PORT"
else
  log "levee not ready:"; tail -10 "$tmp/levee.log" >&2 || true; NOTE[levee]="skipped: not ready"
fi

# ---------------------------------------------------------------- nginx
mkdir -p "$tmp/nginx/logs"
proxy_nginx='proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $host;'
{
  # 3 x SLOW_CONNS client connections and their upstream ones need the files
  nginx_conf_head warn 8192 "worker_rlimit_nofile 16384;"
  cat <<EOF
  limit_req_zone \$host zone=tenant:1m rate=${LIMIT}r/s;
  limit_conn_zone \$server_name zone=over:1m;
  upstream app { server $B; keepalive 64; }
  upstream over { server $OVER; keepalive 64; }
  upstream slow { server $SLOW; keepalive 64; }
  upstream dist { least_conn; $(printf 'server 127.0.0.1:%s; ' "${DPORTS[@]}") keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    server_name tenant.local;
    client_max_body_size 64k;
    location / {
      limit_req zone=tenant burst=$BURST nodelay;
      limit_req_status 429;
      add_header Retry-After 1 always;
      proxy_pass http://app; $proxy_nginx
    }
  }
  server {
    listen 127.0.0.1:$NGINX_PORT default_server;
    server_name other.local hot.local *.cold.local;
    location / { proxy_pass http://app; $proxy_nginx }
  }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    server_name dist.local;
    location / { proxy_pass http://dist; $proxy_nginx }
  }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    server_name over.local;
    limit_conn over $SLOTS;
    limit_conn_status 503;
    limit_conn_log_level info;
    location / { proxy_pass http://over; proxy_next_upstream off; $proxy_nginx }
  }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    server_name slow.local;
    location / { proxy_pass http://slow; $proxy_nginx }
  }
}
EOF
} >"$tmp/nginx.conf"
if nginx_check; then
  nginx_start
  edge_ready nginx "$NGINX_PORT" "$tmp/nginx/logs/error.log"
else
  log "nginx config test failed:"; cat "$tmp/nginx-t.log" >&2; NOTE[nginx]="skipped: config error"
fi

# ---------------------------------------------------------------- haproxy
{
  haproxy_cfg_head
  cat <<EOF
frontend fe
  bind 127.0.0.1:$HAPROXY_PORT
  stick-table type string len 64 size 10k expire 10s store http_req_rate(1s)
  acl tenant hdr(host) -i tenant.local
  http-request track-sc0 hdr(host) if tenant
  http-request deny deny_status 429 hdr Retry-After 1 if tenant { sc_http_req_rate(0) gt $LIMIT }
  http-request deny deny_status 413 if tenant { req.hdr_val(content-length) gt 65536 }
  use_backend be_dist if { hdr(host) -i dist.local }
  use_backend be_over if { hdr(host) -i over.local }
  use_backend be_slow if { hdr(host) -i slow.local }
  default_backend be_app
backend be_app
  server b1 $B
backend be_dist
  balance leastconn
$(for i in "${!DPORTS[@]}"; do echo "  server d$((i+1)) 127.0.0.1:${DPORTS[i]}"; done)
backend be_over
  timeout queue 10ms
  server o1 $OVER maxconn $SLOTS
backend be_slow
  server s1 $SLOW
EOF
} >"$tmp/haproxy.cfg"
if haproxy_check; then
  haproxy_start
  edge_ready haproxy "$HAPROXY_PORT" "$tmp/haproxy.out"
else
  log "haproxy config check failed:"; cat "$tmp/haproxy-c.log" >&2; NOTE[haproxy]="skipped: config error"
fi

# ---------------------------------------------------------------- caddy
if [[ -n $CADDY_BIN ]]; then
  mkdir -p "$tmp/caddy"
  cat >"$tmp/Caddyfile" <<EOF
{
  admin off
  auto_https off
}
http://tenant.local:$CADDY_PORT {
  bind 127.0.0.1
  request_body {
    max_size 64KB
  }
  reverse_proxy $B
}
http://other.local:$CADDY_PORT, http://hot.local:$CADDY_PORT, http://*.cold.local:$CADDY_PORT {
  bind 127.0.0.1
  reverse_proxy $B
}
http://dist.local:$CADDY_PORT {
  bind 127.0.0.1
  reverse_proxy $(printf '127.0.0.1:%s ' "${DPORTS[@]}") {
    lb_policy least_conn
  }
}
http://over.local:$CADDY_PORT {
  bind 127.0.0.1
  reverse_proxy $OVER {
    unhealthy_request_count $SLOTS
    max_fails 1
  }
}
http://slow.local:$CADDY_PORT {
  bind 127.0.0.1
  reverse_proxy $SLOW
}
EOF
  XDG_DATA_HOME="$tmp/caddy" XDG_CONFIG_HOME="$tmp/caddy" HOME="$tmp/caddy" GOMAXPROCS=1 \
    "${ON_PROXY_CPU[@]}" "$CADDY_BIN" run --config "$tmp/Caddyfile" --adapter caddyfile >"$tmp/caddy.log" 2>&1 &
  PIDS+=("$!")
  edge_ready caddy "$CADDY_PORT" "$tmp/caddy.log"
fi

# ---------------------------------------------------------------- the drills
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
limit_secs=$(( $(to_secs "$DURATION") * 12 + 180 ))
for t in levee nginx haproxy caddy; do
  [[ -n ${URL[$t]:-} ]] || continue
  extra=()
  [[ $t == levee ]] && extra=(--config "$tmp/levee.yaml")
  log "levee drill all against $t (${URL[$t]})"
  rc=0
  "${ON_LOAD_CPU[@]}" timeout -k 5 "$limit_secs" "$DRILL" drill all --target "${URL[$t]}" --duration "$DURATION" \
    --host tenant.local --limit "$LIMIT/s" --offered "$OFFERED" --other-host other.local \
    --hot-host hot.local --cold-domain cold.local --dist-host dist.local --backend-port "$DRILL_PORT" \
    --overload-host over.local --overload-port "$OVERLOAD_PORT" --slots "$SLOTS" --service-time "$SERVICE_TIME" \
    --overload-offered "$OVERLOAD_OFFERED" --slow-host slow.local --slow-port "$SLOW_PORT" --slow-conns "$SLOW_CONNS" \
    --route-wait 10s --json --report "$tmp/card-$t.md" "${extra[@]}" >"$tmp/card-$t.json" 2>"$tmp/drill-$t.log" || rc=$?
  if ((rc > 1)); then
    log "drill against $t failed to run (exit $rc):"; tail -5 "$tmp/drill-$t.log" >&2 || true
    NOTE[$t]="drill did not run (exit $rc)"
    continue
  fi
  CARD[$t]="$tmp/card-$t.json"
  [[ -n ${CARDS_DIR:-} ]] && { mkdir -p "$CARDS_DIR"; cp "$tmp/card-$t.json" "$tmp/card-$t.md" "$CARDS_DIR/"; }
  log "$t: $(grep -m1 '"verdict"' "$tmp/card-$t.json" | tr -d ' ,')"
done

args=()
for t in levee nginx haproxy caddy; do
  if [[ -n ${CARD[$t]:-} ]]; then args+=("$t=${CARD[$t]}"); else args+=("$t=note:${NOTE[$t]:-skipped}"); fi
done
go run ./bench/drilltable "${args[@]}" >"$tmp/table.md" || die "bench/drilltable failed"
cat "$tmp/table.md"

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
bench_versions
CADDY_VER=""; [[ -n $CADDY_BIN ]] && CADDY_VER=$("$CADDY_BIN" version 2>/dev/null | awk '{print $1}')
if ((WRITE)); then
  if [[ -z ${CARD[levee]:-} ]]; then
    log "--write: levee did not run, docs/benchmarks.md left unchanged"
  else
    {
      echo "## Drills: levee beside nginx, haproxy and caddy (bench/run.sh)"
      echo
      echo "- command: \`DURATION=$DURATION LIMIT=$LIMIT OFFERED=$OFFERED SLOTS=$SLOTS SERVICE_TIME=$SERVICE_TIME OVERLOAD_OFFERED=$OVERLOAD_OFFERED SLOW_CONNS=$SLOW_CONNS bash bench/run.sh --write\`"
      echo "- date: $DATE"
      echo "- machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, $(uname -sr); pinning: $PIN_DESC; load average $LOAD_BEFORE before the drills, $LOAD_AFTER after (anything above ~2 on 2 CPUs means other work shared the cores, and latency ratios and timeouts are noisy)"
      echo "- load: \`levee drill all\` (docs/drills.md), the same flags for every edge: tenant.local limited to $LIMIT/s and offered $OFFERED, over.local a backend of $SLOTS slots x $SERVICE_TIME offered $OVERLOAD_OFFERED its capacity, slow.local under $SLOW_CONNS slowloris, $SLOW_CONNS slow-body and $SLOW_CONNS slow-read connections at once beside a victim at 50/s, $DURATION per load phase"
      echo "- protections: levee \`rate: $LIMIT/s\`, \`batch: {json_field: uris, max: 1000}\`, p2c; nginx \`limit_req\` ($LIMIT r/s by Host, burst $BURST nodelay, 429 + Retry-After), \`client_max_body_size 64k\`, \`least_conn\`; haproxy \`http_req_rate(1s)\` by Host over $LIMIT → 429 + Retry-After, Content-Length over 64 KB → 413, \`leastconn\`; caddy \`request_body max_size 64KB\`, \`lb_policy least_conn\` (no built-in rate limit); for overload: levee \`concurrency: $SLOTS, queue: {max_wait: 10ms, max_len: $QUEUE_LEN}\`, nginx \`limit_conn $SLOTS\` (503), haproxy \`maxconn $SLOTS\` + \`timeout queue 10ms\`, caddy \`unhealthy_request_count $SLOTS\`; for slow-clients every edge's defaults (levee an app's default limits; nginx, haproxy and caddy a plain proxy)"
      echo "- versions: levee $LEVEE_REV ($GO_VER), nginx $NGINX_VER, haproxy $HAPROXY_VER${CADDY_VER:+, caddy $CADDY_VER}"
      echo
      cat "$tmp/table.md"
      echo
      echo "Ratios: admitted ÷ limit should be near 1 (above: the limit leaks; below: the edge over-refuses); the other tenant's success and batches refused near 1; p99 during ÷ before near 1 (the attack does not reach neighbours); fast max ÷ mean near 1 (even spread); slow ÷ fast mean well below 1 (a slow backend loses traffic); overload goodput ÷ capacity near 1 (the backend stays busy with answers someone waits for), served p99 ÷ unloaded near 1 (the excess is not queued) and excess refused at once near 1 (refused, not left to time out); slow-clients' victim success near 1 (at least 0.999 passes) and its p99 during ÷ before near 1 (slow connections do not hold what the victim needs). A size limit refuses the 740 KB batches too, but it also refuses any large body and lets a batch of small items through; levee counts the items. duplicate-instance is levee only: a second levee on the same config must refuse (the default) or serve with strict limits. Each edge's full report card (checks, streams, status codes) is kept with \`CARDS_DIR=DIR\`."
    } >"$tmp/section-body.md"
    write_doc_section "$tmp/section-body.md"
  fi
fi
