# bench/lib.sh — shared shell for the bench scripts (proxy.sh, overload.sh, distribution.sh).
# Sourced, never run: each script sets BENCH_NAME (e.g. "proxy.sh") and `set -euo pipefail`, then
#   source "$(dirname "$0")/lib.sh"
# Most helpers read globals the script sets first (ports, tmp, TARGETS/URL/PID/HOSTHDR/NOTE, ...).
# shellcheck shell=bash disable=SC2034,SC2154  # globals are set here for, and read here from, the scripts

# ---------------------------------------------------------------- arguments + logging
# bench_parse_args HELP_LAST_LINE "$@" — sets WRITE; --help prints header lines 2..HELP_LAST_LINE
bench_parse_args() {
  local help_end=$1 arg; shift
  WRITE=0
  for arg in "$@"; do
    case "$arg" in
      --write) WRITE=1 ;;
      -h|--help) sed -n "2,${help_end}p" "$0"; exit 0 ;;
      *) echo "$BENCH_NAME: unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
  done
}

log() { printf '[%s] %s\n' "$BENCH_NAME" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- repo root, temp dir + cleanup
# bench_init TMP_PREFIX — cd to the repo root (ROOT), make $tmp, and install the cleanup traps.
# PIDS: every long-running process the script started; LOAD_PID: the running wrk/loadgen, if any.
bench_init() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit
  ROOT=$(pwd)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  PIDS=()
  LOAD_PID=""
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# stop_all: TERM every process in PIDS (newest first), wait up to 5 s each, then KILL; empties PIDS
stop_all() {
  local pid i
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -n ${LOAD_PID:-} ]] && { kill -TERM "$LOAD_PID" 2>/dev/null || true; }
  stop_all
  rm -rf "$tmp"
  exit "$rc"
}

# ---------------------------------------------------------------- tools
# bench_need_tools TOOL... — apt-get install the missing ones (nginx/haproxy also count in /usr/sbin)
bench_need_tools() {
  local t need_pkgs=()
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 && continue
    [[ ($t == nginx || $t == haproxy) && -x /usr/sbin/$t ]] && continue
    case $t in
      # Debian's package names that are not the command's
      h2load) need_pkgs+=(nghttp2-client) ;;
      perf) need_pkgs+=(linux-perf) ;;
      *) need_pkgs+=("$t") ;;
    esac
  done
  if ((${#need_pkgs[@]})); then
    log "installing ${need_pkgs[*]} with apt-get (system services are not used)"
    local -a SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    timeout 180 "${SUDO[@]}" apt-get update -qq >"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; die "apt-get update failed"; }
    timeout 300 "${SUDO[@]}" apt-get install -y -qq "${need_pkgs[@]}" >>"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; die "apt-get install failed"; }
  fi
  export PATH="$PATH:/usr/sbin:/sbin"
  command -v go >/dev/null 2>&1 || die "go is not on PATH"
}

# ---------------------------------------------------------------- CPU pinning
# bench_pinning DESC — sets PINNED, PIN_DESC, ON_PROXY_CPU / ON_LOAD_CPU / ON_BACKEND_CPU and logs
# "pinning: ...". DESC describes the pinned layout. The prefixes are used as "${ON_PROXY_CPU[@]}" cmd & —
# a plain simple command, so bash execs it (and taskset execs cmd) and $! is cmd's own PID, which the
# trap kills and /proc/PID/stat measures.
# PIN_MODE=alone (default): the proxy alone on CPU 0, backend + load generator on CPU 1.
# PIN_MODE=shared: proxy and backend share CPU 0 (a small edge box, a sidecar: every µs the proxy
# spends is taken from the backend), the load generator alone on CPU 1.
PROXY_CPU=0
LOAD_CPU=1
PIN_MODE=${PIN_MODE:-alone}
bench_pinning() {
  PINNED=0
  if [[ ${PIN:-auto} != 0 ]] && command -v taskset >/dev/null 2>&1 && (( $(nproc) >= 2 )); then
    PINNED=1
  fi
  ON_PROXY_CPU=(); ON_LOAD_CPU=(); ON_BACKEND_CPU=()
  case $PIN_MODE in alone|shared) ;; *) die "PIN_MODE must be alone or shared, got $PIN_MODE" ;; esac
  if ((PINNED)); then
    ON_PROXY_CPU=(taskset -c "$PROXY_CPU"); ON_LOAD_CPU=(taskset -c "$LOAD_CPU")
    if [[ $PIN_MODE == shared ]]; then
      ON_BACKEND_CPU=("${ON_PROXY_CPU[@]}")
      PIN_DESC="PIN_MODE=shared: proxy + backend on CPU $PROXY_CPU, load generator on CPU $LOAD_CPU"
    else
      ON_BACKEND_CPU=("${ON_LOAD_CPU[@]}")
      PIN_DESC=$1
    fi
  else
    PIN_DESC="off (taskset missing, PIN=0 or fewer than 2 CPUs)"
  fi
  log "pinning: $PIN_DESC"
}

# ---------------------------------------------------------------- helpers
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# check_ports WHAT PORT... — die if one is taken (WHAT: "backend" or "backends", for the hint)
check_ports() {
  local what=$1 p; shift
  for p in "$@"; do
    if port_busy "$p"; then die "127.0.0.1:$p is already in use (stop whatever listens there, or set BACKEND_PORT for the $what)"; fi
  done
}

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

# proc_ticks PID — "utime stime" of PID alone, in clock ticks; nothing if it has exited
proc_ticks() {
  local stat rest; local -a f
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  rest=${stat##*) }            # fields from 3 (state) on; comm may hold spaces
  read -r -a f <<<"$rest"
  echo "${f[11]} ${f[12]}"     # fields 14 utime, 15 stime
}

# cpu_ticks PID — utime+stime (clock ticks) of PID and all its descendants
cpu_ticks() {
  local total=0 p u s kids
  local -a queue=("$1")
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    if read -r u s < <(proc_ticks "$p") && [[ -n $u ]]; then
      total=$((total + u + s))
    fi
    kids=$(pgrep -P "$p" 2>/dev/null || true)
    [[ -n $kids ]] && mapfile -t -O "${#queue[@]}" queue <<<"$kids"
  done
  echo "$total"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if(NR==0){print "nan"; exit}
  if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
# med "LIST" — median of a space-separated list of per-round values
# shellcheck disable=SC2086  # word-splitting of the per-round lists is intended
med() { median ${1:-}; }
# ratio A B — A/B to 2 decimals, "n/a" if B is 0 or A is "nan"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if(b+0==0 || a=="nan") print "n/a"; else printf "%.2f\n", a/b }'; }
# fmt V DECIMALS — "n/a" for nan or empty
fmt()   { awk -v v="$1" -v p="$2" 'BEGIN{ if(v=="nan"||v=="") print "n/a"; else printf "%." p "f\n", v }'; }

# ---------------------------------------------------------------- builds
# build_bench NAME — go build ./bench/NAME into $tmp/NAME, or die
build_bench() { go build -o "$tmp/$1" "./bench/$1" || die "bench/$1 does not build"; }

# build_levee — LEVEE_REV (short commit, "+dirty" if the tree differs) and $tmp/levee; false if it
# does not build (then logged with the first errors)
build_levee() {
  LEVEE_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || LEVEE_REV="$LEVEE_REV+dirty"
  log "building levee (./cmd/levee)"
  if go build -o "$tmp/levee" ./cmd/levee >"$tmp/levee-build.log" 2>&1; then return 0; fi
  log "LEVEE SKIPPED: ./cmd/levee does not build; first errors:"
  head -15 "$tmp/levee-build.log" >&2 || true
  return 1
}

# start_levee LIMITS_YAML — build levee and run one process (GOMAXPROCS=1, proxy CPU) with app
# "bench" (Host bench.local, the one backend, LIMITS_YAML under limits:, none when empty: the
# defaults, as a new user's config has them) on one plain listener LEVEE_PORT, as a new user
# writes it (HTTP/1.1 on the event loops), admin LEVEE_ADMIN_PORT with admin.pprof on (so a
# profile can be taken during a run, docs/benchmarks.md; idle, it costs nothing). Sets URL/HOSTHDR/PID of
# target levee, or NOTE[levee]. LEVEE_SERVER, if set, is a server: block (YAML flow) for it, e.g.
# LEVEE_SERVER='{event_loop: false}' (fasthttp's goroutine per connection).
start_levee() {
  if ! build_levee; then NOTE[levee]="skipped: does not build"; return 0; fi
  {
    echo "listen: 127.0.0.1:$LEVEE_PORT"
    echo "admin: {addr: 127.0.0.1:$LEVEE_ADMIN_PORT, pprof: true}"
    echo "apps:"
    echo "  bench:"
    echo "    hosts: [bench.local]"
    echo "    backends: [127.0.0.1:$BACKEND_PORT]"
    if [[ -n $1 ]]; then echo "    limits:"; echo "$1"; fi
    if [[ -n ${LEVEE_SERVER:-} ]]; then echo "server: $LEVEE_SERVER"; fi
  } >"$tmp/levee.yaml"
  GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee" serve --config "$tmp/levee.yaml" >"$tmp/levee.log" 2>&1 &
  PID[levee]=$!; PIDS+=("${PID[levee]}")
  if wait_http "http://127.0.0.1:$LEVEE_ADMIN_PORT/readyz" 10 \
     && wait_http "http://127.0.0.1:$LEVEE_PORT/" 5 -H 'Host: bench.local'; then
    URL[levee]="http://127.0.0.1:$LEVEE_PORT/"; HOSTHDR[levee]="bench.local"
  else
    log "LEVEE SKIPPED: not ready within 10 s (admin /readyz, then GET / with Host: bench.local); last log lines:"
    tail -15 "$tmp/levee.log" >&2 || true
    kill -TERM "${PID[levee]}" 2>/dev/null || true
    NOTE[levee]="skipped: not ready"
  fi
}

# levee_bench_yaml FILE PORT TLS_PORT ADMIN_PORT [SERVER] — the config a new user writes for the bench's one
# app: a plain listener on PORT and a TLS one on TLS_PORT ($tmp/cert.pem and key.pem), default
# limits, app "bench" (Host bench.local) on the backend at BACKEND_PORT; admin with pprof on
levee_bench_yaml() {
  cat >"$1" <<EOF
listen:
  - 127.0.0.1:$2
  - {addr: 127.0.0.1:$3, tls: {cert: $tmp/cert.pem, key: $tmp/key.pem}}
admin: {addr: 127.0.0.1:$4, pprof: true}
apps:
  bench:
    hosts: [bench.local]
    backends: [127.0.0.1:$BACKEND_PORT]
EOF
  if [[ -n ${5:-} ]]; then echo "server: $5" >>"$1"; fi
}

# peer_ratios TABLE_VALUES... — "levee ÷ nginx" and "levee ÷ haproxy" lines for the named columns:
# peer_ratios "req/s" RPS "proxy CPU" CPU ... (each an associative array of per-round lists)
peer_ratios() {
  local peer label arr lv pv line
  for peer in nginx haproxy ${PEER_EXTRA:-}; do
    line="- levee ÷ $peer (same run):"
    local -a args=("$@")
    local i
    for ((i=0; i<${#args[@]}; i+=2)); do
      label=${args[i]}; arr=${args[i+1]}
      local -n ref=$arr
      lv=$(med "${ref[levee]:-}"); pv=$(med "${ref[$peer]:-}")
      line+=" $label $(ratio "$lv" "$pv"),"
      unset -n ref
    done
    echo "${line%,}"
  done
}

# ---------------------------------------------------------------- nginx + haproxy
# nginx_conf_head ERROR_LOG_LEVEL WORKER_CONNECTIONS [MAIN_DIRECTIVE] — the start of an nginx.conf
# running in the foreground from $tmp/nginx, up to and including the open "http {" block's common
# part (no access log, temp paths in $tmp, long client keep-alive)
nginx_conf_head() {
  echo "daemon off;"
  echo "worker_processes 1;"
  [[ -n ${3:-} ]] && echo "$3"
  cat <<EOF
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log $1;
events { worker_connections $2; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path       $tmp/nginx/proxy;
  fastcgi_temp_path     $tmp/nginx/fastcgi;
  uwsgi_temp_path       $tmp/nginx/uwsgi;
  scgi_temp_path        $tmp/nginx/scgi;
  keepalive_requests 1000000;
  keepalive_timeout  75s;
EOF
}

# nginx_proxy_block KEEPALIVE PORT [TLS_PORT] — the rest of an nginx.conf after nginx_conf_head: one
# server on PORT (and on TLS_PORT with ssl and http2, $tmp/cert.pem and key.pem) proxying every
# request to the backend at BACKEND_PORT over HTTP/1.1, with KEEPALIVE idle connections kept
nginx_proxy_block() {
  cat <<EOF
  upstream bench_backend {
    server 127.0.0.1:$BACKEND_PORT;
    keepalive $1;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$2;
EOF
  if [[ -n ${3:-} ]]; then
    cat <<EOF
    listen 127.0.0.1:$3 ssl http2;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
EOF
  fi
  cat <<'EOF'
    location / {
      proxy_pass http://bench_backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
}

# haproxy_cfg_head — global + defaults: one thread, keep-alive both sides, http-reuse always
haproxy_cfg_head() {
  cat <<'EOF'
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
EOF
}

# write_haproxy_single [BACKEND_LINE] [SERVER_OPTS] — $tmp/haproxy.cfg: frontend on HAPROXY_PORT,
# one server b1 = the backend (BACKEND_LINE, e.g. "  timeout queue 10ms", goes before the server)
write_haproxy_single() {
  {
    haproxy_cfg_head
    echo "frontend fe_bench"
    echo "  bind 127.0.0.1:$HAPROXY_PORT"
    echo "  default_backend be_bench"
    echo "backend be_bench"
    [[ -n ${1:-} ]] && echo "$1"
    echo "  server b1 127.0.0.1:$BACKEND_PORT${2:+ $2}"
  } >"$tmp/haproxy.cfg"
}

# nginx_check / haproxy_check — test $tmp/nginx.conf / $tmp/haproxy.cfg (output in $tmp/*-t.log, *-c.log)
nginx_check()   { "$NGINX_BIN" -t -q -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx.conf" >"$tmp/nginx-t.log" 2>&1; }
haproxy_check() { "$HAPROXY_BIN" -c -q -f "$tmp/haproxy.cfg" >"$tmp/haproxy-c.log" 2>&1; }
# nginx_start / haproxy_start — run it in the foreground on the proxy CPU; its PID is appended to PIDS
nginx_start() {
  "${ON_PROXY_CPU[@]}" "$NGINX_BIN" -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx.conf" >"$tmp/nginx.out" 2>&1 &
  PIDS+=("$!")
}
haproxy_start() {
  "${ON_PROXY_CPU[@]}" "$HAPROXY_BIN" -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.out" 2>&1 &
  PIDS+=("$!")
}

# start_nginx_target / start_haproxy_target — check the config, start, and on GET / = 200 at
# NGINX_PORT / HAPROXY_PORT add target nginx / haproxy (TARGETS, URL, PID, HOSTHDR); else NOTE
start_nginx_target() {
  if nginx_check; then
    nginx_start; PID[nginx]=${PIDS[-1]}
    if wait_http "http://127.0.0.1:$NGINX_PORT/" 10; then
      TARGETS+=(nginx); URL[nginx]="http://127.0.0.1:$NGINX_PORT/"; HOSTHDR[nginx]=""
    else
      log "nginx not ready:"; tail -10 "$tmp/nginx/logs/error.log" "$tmp/nginx.out" >&2 || true
      NOTE[nginx]="skipped: not ready"
    fi
  else
    log "nginx config test failed:"; cat "$tmp/nginx-t.log" >&2; NOTE[nginx]="skipped: config error"
  fi
}
start_haproxy_target() {
  if haproxy_check; then
    haproxy_start; PID[haproxy]=${PIDS[-1]}
    if wait_http "http://127.0.0.1:$HAPROXY_PORT/" 10; then
      TARGETS+=(haproxy); URL[haproxy]="http://127.0.0.1:$HAPROXY_PORT/"; HOSTHDR[haproxy]=""
    else
      log "haproxy not ready:"; tail -10 "$tmp/haproxy.out" >&2 || true
      NOTE[haproxy]="skipped: not ready"
    fi
  else
    log "haproxy config check failed:"; cat "$tmp/haproxy-c.log" >&2; NOTE[haproxy]="skipped: config error"
  fi
}

# ---------------------------------------------------------------- load
# run_wrk TARGET DURATION OUTFILE [extra wrk args...] — wrk -t1 -c$CONNS on the load CPU
run_wrk() {
  local t=$1 d=$2 out=$3 limit; shift 3
  local -a hdr=()
  [[ -n ${HOSTHDR[$t]} ]] && hdr=(-H "Host: ${HOSTHDR[$t]}")
  limit=$(( $(to_secs "$d") + 15 ))
  # in the background + wait, so a TERM/INT to this script runs the trap at once (which kills wrk)
  "${ON_LOAD_CPU[@]}" timeout -k 5 "$limit" wrk -t1 -c"$CONNS" -d"$d" "$@" "${hdr[@]}" "${URL[$t]}" >"$out" 2>&1 &
  LOAD_PID=$!
  if ! wait "$LOAD_PID"; then LOAD_PID=""; log "wrk against $t failed:"; cat "$out" >&2; return 1; fi
  LOAD_PID=""
}

# ---------------------------------------------------------------- output
# bench_versions — CPU_MODEL, NGINX_VER, HAPROXY_VER, WRK_VER (if wrk is there), GO_VER, DATE
bench_versions() {
  CPU_MODEL=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
  NGINX_VER=""; HAPROXY_VER=""
  [[ -n ${NGINX_BIN:-} ]] && NGINX_VER=$("$NGINX_BIN" -v 2>&1 | sed 's/.*version: //')
  [[ -n ${HAPROXY_BIN:-} ]] && HAPROXY_VER=$("$HAPROXY_BIN" -v 2>/dev/null | awk 'NR==1{print $3}')
  WRK_VER=""
  if command -v wrk >/dev/null 2>&1; then WRK_VER=$(wrk -v 2>&1 | awk 'NR==1{print $2}' || true); fi
  GO_VER=$(go env GOVERSION)
  DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
}

# write_doc_section BODY_FILE [AFTER_HEADING] — put BODY_FILE between the
# "<!-- bench/$BENCH_NAME:begin/end -->" markers of docs/benchmarks.md (created if missing):
# replace the marked section if there is one; else insert it before the "## " heading that follows
# the heading matching the regex AFTER_HEADING (if given and found), else append it at the end.
write_doc_section() {
  local body=$1 after=${2:-} doc="$ROOT/docs/benchmarks.md" section="$tmp/section.md"
  local name=${DOC_SECTION:-$BENCH_NAME}
  local begin="<!-- bench/$name:begin -->" end="<!-- bench/$name:end -->"
  mkdir -p "$ROOT/docs"
  # shellcheck disable=SC2016  # literal backticks (Markdown)
  [[ -f $doc ]] || printf '# Benchmarks\n\nNumbers measured with the scripts in `bench/` (see bench/README.md).\n' >"$doc"
  { echo "$begin"; cat "$body"; echo "$end"; } >"$section"
  if grep -qF "$begin" "$doc"; then
    awk -v sec="$section" -v b="$begin" -v e="$end" '
      index($0, b) { while ((getline l < sec) > 0) print l; skip=1; next }
      index($0, e) { skip=0; next }
      !skip' "$doc" >"$tmp/doc.new"
    cat "$tmp/doc.new" >"$doc"
  elif [[ -n $after ]]; then
    awk -v sec="$section" -v after="$after" '
      function emit(){ while ((getline l < sec) > 0) print l; print ""; done=1 }
      # before the next section: its heading, or the begin marker above it
      (/^## / || /^<!-- bench\/.*:begin -->$/) && ingate && !done { emit() }
      $0 ~ after { ingate=1 }
      { print }
      END { if (!done) { print ""; emit() } }' "$doc" >"$tmp/doc.new"
    cat "$tmp/doc.new" >"$doc"
  else
    { echo; cat "$section"; } >>"$doc"
  fi
  log "wrote section to docs/benchmarks.md"
}
