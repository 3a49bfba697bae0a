#!/usr/bin/env bash
# bench/ab.sh — two builds of levee beside nginx, in alternating rounds: is B cheaper than A?
#
# Usage:  bash bench/ab.sh
#   No --write: a comparison of two builds is a step's evidence (a commit message, a closing
#   note), not a figure of the docs.
# Environment (defaults in brackets):
#   A [HEAD]  B [.]   the builds: a commit (anything git rev-parse takes), or "." for the working tree
#   A_SERVER, B_SERVER [none]  a server: block (YAML flow) for A's or B's config, to compare two
#                     settings of one build: A=. B=. B_SERVER='{event_loop: false}'
#   PROTO [h1]        h1 (wrk), h1tls (wrk over TLS) or h2tls (h2load -m1)
#   CONNS [1024]      client connections       ROUNDS [5]  rounds of A, B, nginx in turn
#   DURATION [4s]     load per build and round (after one warm-up round of 2s each)
#   PIN_MODE [alone]  alone: the proxies on CPU 0, backend + load on CPU 1;
#                     shared: proxies and backend on CPU 0, load on CPU 1
#   SYSCALLS [0]      1: before the rounds, count each proxy's system calls per request with
#                     `perf trace -s` (it slows the run it counts: a count, not a time)
#   BACKEND_PORT [9131]   PORT_BASE [18380]: nginx on it (TLS +100), A +2, B +3, admins +12, +13
#
# Why: this host's speed swings by 30% from one minute to the next, so two runs of bench/matrix.sh
# cannot tell a 5% step from noise. Here A, B and nginx run in the same minute, round after round,
# on the same backend, each with the config a new user writes (levee: one plain and one TLS
# listener, default limits; nginx: bench/matrix.sh's). Each round prints, per proxy, its CPU per
# answered request (utime+stime from /proc over the round, ÷ responses) split into user and kernel
# time, and the ratios A ÷ nginx, B ÷ nginx and B ÷ A; the end, their medians. The user/kernel split
# says where a gap is: at 1,024 connections levee's kernel time per request is nginx's, its user
# time more than twice nginx's (docs/benchmarks.md, "Where levee's time goes").
set -euo pipefail

BENCH_NAME=ab.sh
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_parse_args 24 "$@"
((WRITE == 0)) || die "ab.sh writes no doc section (see --help)"

A=${A:-HEAD}; B=${B:-.}
PROTO=${PROTO:-h1}; CONNS=${CONNS:-1024}; ROUNDS=${ROUNDS:-5}; DURATION=${DURATION:-4s}
PIN_MODE=${PIN_MODE:-alone}; SYSCALLS=${SYSCALLS:-0}
BACKEND_PORT=${BACKEND_PORT:-9131}; BASE=${PORT_BASE:-18380}
case $PROTO in h1|h1tls|h2tls) ;; *) die "PROTO must be h1, h1tls or h2tls, got $PROTO" ;; esac
[[ $CONNS =~ ^[1-9][0-9]*$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "CONNS and ROUNDS must be positive integers"
(( $(to_secs "$DURATION") >= 1 )) || die "DURATION must be at least 1s"
declare -A PORT=([nginx]=$BASE [A]=$((BASE + 2)) [B]=$((BASE + 3)))
declare -A ADMIN=([A]=$((BASE + 12)) [B]=$((BASE + 13)))

bench_init levee-ab
tools=(nginx curl openssl); if [[ $PROTO == h2tls ]]; then tools+=(h2load); else tools+=(wrk); fi
((SYSCALLS)) && tools+=(perf)
bench_need_tools "${tools[@]}"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
check_ports backend "$BACKEND_PORT" "${PORT[@]}" $((BASE + 100)) $((BASE + 102)) $((BASE + 103)) "${ADMIN[@]}"

# build WHO REV — levee at REV ("." the working tree) into $tmp/levee-WHO; REVS[WHO] names it
declare -A REVS
build() {
  local who=$1 rev=$2 src=$ROOT
  if [[ $rev == . ]]; then
    REVS[$who]="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo +dirty)"
  else
    REVS[$who]=$(git rev-parse --short "$rev^{commit}") || die "$who=$rev is not a commit"
    src=$tmp/src-$who
    git worktree add -f --detach "$src" "$rev" >/dev/null 2>&1 || die "cannot check out $rev"
  fi
  log "building $who: levee at ${REVS[$who]}"
  (cd "$src" && go build -o "$tmp/levee-$who" ./cmd/levee) || die "$who (${REVS[$who]}) does not build"
  [[ $src == "$ROOT" ]] || git worktree remove --force "$src"
}
build A "$A"; build B "$B"
build_bench backend
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=bench.local -addext subjectAltName=DNS:bench.local,IP:127.0.0.1 \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" >/dev/null 2>&1 || die "openssl could not make a certificate"
NGINX_BIN=$(command -v nginx)

PROXY_CPU=0; LOAD_CPU=1
bench_pinning "proxies on CPU $PROXY_CPU, backend + load on CPU $LOAD_CPU"
GOMAXPROCS=1 "${ON_BACKEND_CPU[@]}" "$tmp/backend" -listen "127.0.0.1:$BACKEND_PORT" >"$tmp/backend.log" 2>&1 &
PIDS+=("$!")
wait_http "http://127.0.0.1:$BACKEND_PORT/" 10 || die "backend not ready"
declare -A PID
for who in A B; do
  server=A_SERVER; [[ $who == B ]] && server=B_SERVER
  levee_bench_yaml "$tmp/$who.yaml" "${PORT[$who]}" $((PORT[$who] + 100)) "${ADMIN[$who]}" "${!server:-}"
  GOMAXPROCS=1 "${ON_PROXY_CPU[@]}" "$tmp/levee-$who" serve --config "$tmp/$who.yaml" >"$tmp/$who.log" 2>&1 &
  PID[$who]=$!; PIDS+=("$!")
  wait_http "http://127.0.0.1:${ADMIN[$who]}/readyz" 10 || { tail "$tmp/$who.log" >&2; die "levee $who not ready"; }
done
mkdir -p "$tmp/nginx/logs"
{
  nginx_conf_head warn 8192 "worker_rlimit_nofile 65536;"
  nginx_proxy_block 1024 "${PORT[nginx]}" $((PORT[nginx] + 100))
} >"$tmp/nginx.conf"
nginx_check || { cat "$tmp/nginx-t.log" >&2; die "nginx config"; }
nginx_start
wait_http "http://127.0.0.1:${PORT[nginx]}/" 10 || die "nginx not ready"
PID[nginx]=$(pgrep -P "${PIDS[-1]}" | head -1) # the worker: the master only waits
[[ -n ${PID[nginx]} ]] || die "no nginx worker"

HZ=$(getconf CLK_TCK)

# load WHO SECONDS — answered responses of a run against WHO
load() {
  local who=$1 secs=$2 scheme=http port=${PORT[$1]} out
  [[ $PROTO != h1 ]] && { scheme=https; port=$((port + 100)); }
  if [[ $PROTO == h2tls ]]; then
    out=$("${ON_LOAD_CPU[@]}" timeout -k 5 $((secs + 30)) h2load -t1 -c"$CONNS" -m1 -D "$secs" \
      -H ':authority: bench.local' "$scheme://127.0.0.1:$port/" 2>&1 || true)
    awk '/^requests:/ { print $8 + 0 }' <<<"$out"
  else
    out=$("${ON_LOAD_CPU[@]}" timeout -k 5 $((secs + 30)) wrk -t1 -c"$CONNS" -d"${secs}s" \
      -H 'Host: bench.local' "$scheme://127.0.0.1:$port/" 2>&1 || true)
    awk '/requests in/ { print $1 + 0 }' <<<"$out"
  fi
}

# measure WHO SECONDS — "user_us kernel_us requests": WHO's CPU per answered request over a run
measure() {
  local who=$1 t0 t1 n
  t0=$(proc_ticks "${PID[$who]}"); n=$(load "$who" "$2"); t1=$(proc_ticks "${PID[$who]}")
  awk -v a="$t0" -v b="$t1" -v n="$n" -v hz="$HZ" 'BEGIN { split(a, x, " "); split(b, y, " ")
    if (n <= 0) { print "nan nan 0"; exit }
    printf "%.2f %.2f %d\n", (y[1]-x[1]) * 1e6 / hz / n, (y[2]-x[2]) * 1e6 / hz / n, n }'
}

secs=$(to_secs "$DURATION")
log "A = levee ${REVS[A]}, B = levee ${REVS[B]}; $PROTO, $CONNS connections, $ROUNDS rounds of ${secs}s; $PIN_DESC"
for who in A B nginx; do load "$who" 2 >/dev/null; done # warm-up: connections, pools, TLS sessions

if ((SYSCALLS)); then
  for who in A B nginx; do
    # The trace spans the whole load run, so the requests it answered are the load tool's count.
    perf trace -s -p "${PID[$who]}" -o "$tmp/sys-$who.txt" >/dev/null 2>&1 & tp=$!
    sleep 1 # attached
    n=$(load "$who" "$secs")
    kill -INT "$tp" 2>/dev/null || true
    wait "$tp" || true
    awk -v who="$who" -v n="$n" '
      $1 ~ /^[a-z_0-9]+$/ && $2 ~ /^[0-9]+$/ { calls[$1] += $2; err[$1] += $3; all += $2 }
      END { if (n <= 0) exit
        printf "%s: %.2f system calls per request (traced, so slower) —", who, all / n
        for (c in calls) if (calls[c] / n >= 0.01) printf " %s %.2f (%.2f failed)", c, calls[c] / n, err[c] / n
        print "" }' "$tmp/sys-$who.txt" >&2
  done
fi

declare -A U K T # per round lists of user and kernel µs; T: this round's total per proxy
RA="" RB="" RBA=""
printf '| round | A µs/req (user + kernel) | B µs/req | nginx µs/req | A ÷ nginx | B ÷ nginx | B ÷ A |\n|---:|---|---|---|---:|---:|---:|\n'
for ((r = 1; r <= ROUNDS; r++)); do
  line="| $r"
  for who in A B nginx; do
    read -r u k n < <(measure "$who" "$secs")
    U[$who]+=" $u"; K[$who]+=" $k"
    T[$who]=$(awk -v u="$u" -v k="$k" 'BEGIN{print u+k}')
    line+=" | $(fmt "${T[$who]}" 1) ($(fmt "$u" 1) + $(fmt "$k" 1)), $((n / secs))/s"
  done
  a=$(ratio "${T[A]}" "${T[nginx]}"); b=$(ratio "${T[B]}" "${T[nginx]}"); ba=$(ratio "${T[B]}" "${T[A]}")
  echo "$line | $a | $b | $ba |"
  RA+=" $a"; RB+=" $b"; RBA+=" $ba"
done
echo
echo "medians over $ROUNDS rounds (levee A ${REVS[A]}, B ${REVS[B]}; $PROTO, $CONNS connections, $PIN_MODE):"
for who in A B nginx; do
  echo "- $who: user $(fmt "$(med "${U[$who]}")" 1) µs + kernel $(fmt "$(med "${K[$who]}")" 1) µs per request"
done
# medians of the rounds' own ratios: each compares runs of the same minute
echo "- B ÷ A: $(fmt "$(med "$RBA")" 2); A ÷ nginx: $(fmt "$(med "$RA")" 2); B ÷ nginx: $(fmt "$(med "$RB")" 2)"
