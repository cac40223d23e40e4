#!/usr/bin/env bash
# Side by side, on one fresh redis-server of its own (no persistence, a free
# loopback port): what a timer costs Redis end to end, and how fast and how
# late it is, for
#   ours     the example `bench` (1 scheduler node, 2 consumers)
#   poller   the same example's `--poller`: the common 100 ms sorted-set poller
#   before   (optional) another build's CLI with its `bench` command (d0e9184
#            and earlier had it in the CLI), e.g. an older commit's
#   bullmq   (optional, --bullmq; needs node) BullMQ 5 delayed jobs, 2 workers
#            of concurrency 50 (redis/bench/bullmq.mjs), installed with npm
#            into target/bullmq on first use
# Each round runs every variant once, in turn, on an emptied server; Redis's
# own counters are reset before and read after each run (INFO commandstats:
# commands, those inside scripts included; INFO cpu: Redis's CPU time).
#
#   redis/bench/compare.sh [--count N] [--spread-ms MS] [--rounds R] [--before PATH] [--bullmq]
#
# Builds the CLI in release mode first. Needs redis-server, redis-cli, python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
count=100000 spread=5000 rounds=3 before="" bullmq=""
while [ $# -gt 0 ]; do
    case "$1" in
        --count) count=$2; shift 2 ;;
        --spread-ms) spread=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --before) before=$2; shift 2 ;;
        --bullmq) bullmq=yes; shift ;;
        *) echo "usage: $0 [--count N] [--spread-ms MS] [--rounds R] [--before PATH] [--bullmq]" >&2; exit 2 ;;
    esac
done
cargo build --release -q -p purgatorio-redis --example bench
ours="${CARGO_TARGET_DIR:-target}/release/examples/bench"
if [ -n "$bullmq" ]; then
    node_dir="${CARGO_TARGET_DIR:-target}/bullmq"
    mkdir -p "$node_dir"
    cp redis/bench/bullmq.mjs "$node_dir/"
    [ -d "$node_dir/node_modules/bullmq" ] \
        || (cd "$node_dir" && { [ -f package.json ] || npm init -y >/dev/null; } && npm install --silent bullmq@5)
fi
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    >"$dir/redis.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
until cli ping >/dev/null 2>&1; do sleep 0.1; done

# commands (INFO, CONFIG and FLUSHALL excluded) and CPU µs so far
usage() {
    local calls cpu
    calls=$(cli info commandstats | tr -d '\r' | awk -F'[:=,]' '
        /^cmdstat_/ && !/^cmdstat_(info|config|flushall)/ { s += $3 }
        END { print s + 0 }')
    cpu=$(cli info cpu | tr -d '\r' \
        | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%d", s * 1e6 }')
    echo "$calls $cpu"
}

run() { # name, binary, extra arguments
    local name=$1 bin=$2; shift 2
    cli flushall >/dev/null
    cli config resetstat >/dev/null
    read -r c0 u0 < <(usage)
    local out
    if [ "$bin" = node ]; then
        out=$(cd "$node_dir" && node bullmq.mjs "$port" "$count" "$spread")
    elif [ "$name" = before ]; then
        out=$("$bin" --url "redis://127.0.0.1:$port" --namespace "cmp" bench \
            --count "$count" --schedulers 1 --spread-ms "$spread" "$@")
    else
        out=$("$bin" --url "redis://127.0.0.1:$port" --namespace "cmp" \
            --count "$count" --schedulers 1 --spread-ms "$spread" "$@")
    fi
    read -r c1 u1 < <(usage)
    local sched deliv late
    sched=$(echo "$out" | awk '/^schedules\/s/ { print $2 }')
    deliv=$(echo "$out" | awk '/^deliveries\/s/ { print $2 }')
    late=$(echo "$out" | awk '/^lateness/ { print $3 "/" $5 "/" $7 }')
    early=$(echo "$out" | awk '/^early, lost/ { print $3 $4 }')
    printf '%-8s %12s %12s %16s %11s %10.2f %10.1f\n' "$name" "$sched" "$deliv" "$late" "$early" \
        "$(awk "BEGIN { print ($c1 - $c0) / $count }")" "$(awk "BEGIN { print ($u1 - $u0) / $count }")"
}

echo "redis-server $(redis-server --version | awk '{print $3}'), $count timers over $spread ms, load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %12s %12s %16s %11s %10s %10s\n' variant schedules/s deliveries/s "late p50/p99/max" early,lost cmds/timer "cpu µs/t"
for round in $(seq "$rounds"); do
    run ours "$ours"
    run poller "$ours" --poller
    if [ -n "$before" ]; then run before "$before"; fi
    if [ -n "$bullmq" ]; then run bullmq node; fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
