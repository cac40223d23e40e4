#!/usr/bin/env bash
# Side by side, on one fresh redis-server of its own (no persistence, or with
# --aof the append-only file with `appendfsync everysec`; a free loopback port): what a timer costs Redis end to end, and how fast and how
# late it is, for
#   ours     the example `bench` (1 scheduler node, 2 consumers)
#   poller   the same example's `--poller`: the common 100 ms sorted-set poller
#   before   (optional) another build's CLI with its `bench` command (d0e9184
#            and earlier had it in the CLI), e.g. an older commit's
#   earlier  (optional, --before-example PATH) another build's example `bench`
#   bullmq   (optional, --bullmq; needs node) BullMQ 5 delayed jobs, 2 workers
#            of concurrency 50 (redis/bench/bullmq.mjs), installed with npm
#            into target/bullmq on first use
# Each round runs every variant once, in turn, on an emptied server; Redis's
# own counters are reset before and read after each run (INFO commandstats:
# commands, those inside scripts included; INFO cpu: Redis's CPU time).
#
#   redis/bench/compare.sh [--count N] [--spread-ms MS] [--rounds R] [--schedulers S] [--before PATH] [--before-example PATH]
#                          [--bullmq] [--aof] [--scripts]
#
# Redis's CPU is read from /proc/<pid>/stat (utime + stime of every thread of
# redis-server, the AOF's background fsync included), and commands per
# script from INFO commandstats (printed with --scripts).
#
# Builds the CLI in release mode first. Needs redis-server, redis-cli, python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
count=100000 spread=5000 rounds=3 before="" earlier="" bullmq="" aof=no schedulers=1 scripts=""
while [ $# -gt 0 ]; do
    case "$1" in
        --count) count=$2; shift 2 ;;
        --spread-ms) spread=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --before) before=$2; shift 2 ;;
        --bullmq) bullmq=yes; shift ;;
        --before-example) earlier=$2; shift 2 ;;
        --aof) aof=yes; shift ;;
        --schedulers) schedulers=$2; shift 2 ;;
        --scripts) scripts=yes; shift ;;
        *) echo "usage: $0 [--count N] [--spread-ms MS] [--rounds R] [--schedulers S] [--before PATH] [--before-example PATH] [--bullmq] [--aof] [--scripts]" >&2; exit 2 ;;
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
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly "$aof" --appendfsync everysec \
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
    # utime + stime (fields 14, 15 after the name), in clock ticks
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%d", ($12 + $13) * 1e6 / hz }' \
        "/proc/$server/stat")
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
            --count "$count" --schedulers "$schedulers" --spread-ms "$spread" "$@")
    fi
    read -r c1 u1 < <(usage)
    local sched deliv late
    sched=$(echo "$out" | awk '/^schedules\/s/ { print $2 }')
    deliv=$(echo "$out" | awk '/^deliveries\/s/ { print $2 }')
    late=$(echo "$out" | awk '/^lateness/ { print $3 "/" $5 "/" $7 }')
    early=$(echo "$out" | awk '/^early, lost, duplicated/ { print $4 $5 $6 }')
    printf '%-8s %12s %12s %16s %11s %10.2f %10.1f\n' "$name" "$sched" "$deliv" "$late" "$early" \
        "$(awk "BEGIN { print ($c1 - $c0) / $count }")" "$(awk "BEGIN { print ($u1 - $u0) / $count }")"
}

# One more run of ours with every call in the slow log: µs inside Redis per
# timer by script (its KEYS name it) and by command, and calls per timer;
# then the commands the scripts ran (their µs are inside the scripts').
# Wall time inside Redis, so a loaded machine's waits are in it; the log
# costs CPU too, so this run's figures stand apart from the table's.
by_script() { # name, binary
    echo "  $1, by script/command (slow log on): calls/timer, µs/timer"
    cli flushall >/dev/null
    cli config resetstat >/dev/null
    cli slowlog reset >/dev/null
    cli config set slowlog-max-len 1000000 >/dev/null
    cli config set slowlog-log-slower-than 0 >/dev/null
    "$2" --url "redis://127.0.0.1:$port" --namespace "cmp" \
        --count "$count" --schedulers "$schedulers" --spread-ms "$spread" >/dev/null
    cli config set slowlog-log-slower-than -1 >/dev/null
    cli --json slowlog get -1 | python3 -c '
import json, sys
n = int(sys.argv[1])
rows = {}
for entry in json.load(sys.stdin):
    args = entry[3] or [""]
    name = args[0].lower()
    if name in ("info", "config", "flushall", "slowlog"):
        continue
    if name == "evalsha" and len(args) > 2 and args[2].isdigit():
        keys = [k.split(":")[-1] for k in args[3:3 + int(args[2])]]
        name = "script(" + ",".join(keys) + ")"
    if entry[4] == "?:0":
        name = "  (in scripts) " + name
    calls, us = rows.get(name, (0, 0))
    rows[name] = (calls + 1, us + entry[2])
total = sum(us for name, (_, us) in rows.items() if not name.startswith(" "))
print("    %-44s %8s %8.2f" % ("total (calls from clients)", "", total / n))
for name, (calls, us) in sorted(rows.items(), key=lambda r: (r[0].startswith(" "), -r[1][1])):
    if us >= 0.01 * n:
        print("    %-44s %8.3f %8.2f" % (name, calls / n, us / n))
' "$count"
    cli slowlog reset >/dev/null
}

echo "redis-server $(redis-server --version | awk '{print $3}'), appendonly $aof, $schedulers scheduler(s), $count timers over $spread ms, load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %12s %12s %16s %11s %10s %10s\n' variant schedules/s deliveries/s "late p50/p99/max" early,lost,dup cmds/timer "cpu µs/t"
for round in $(seq "$rounds"); do
    run ours "$ours"
    run poller "$ours" --poller
    if [ -n "$before" ]; then run before "$before"; fi
    if [ -n "$earlier" ]; then run earlier "$earlier"; fi
    if [ -n "$bullmq" ]; then run bullmq node; fi
done
if [ -n "$scripts" ]; then
    by_script ours "$ours"
    if [ -n "$earlier" ]; then by_script earlier "$earlier"; fi
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
