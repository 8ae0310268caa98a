#!/bin/sh
# Instructions per relayed call, by phase, counted by callgrind: repeatable where time is not.
#
#   bench/callgrind.sh [--bins DIR] [--out DIR] [--calls N] [--payload TOOL] [--systems LIST]
#
# DIR holds the `leo` and `leo-mcp` to count (default: target/release, this build); the client,
# the app and `leo-bench` are this build's (target/release/leo-bench, built by `bench/run.sh`
# or `cargo build --release -p leo-cli -p leo-mcp -p leo-bench`). For each system (`leo`:
# the result posted with its claim, `leo-claim`: claim then result) it runs leo-bench's latency
# row twice, with `--calls 200` and `--calls 200+N`, `leo` and `leo-mcp` each under
# `valgrind --tool=callgrind`; the difference of the two runs divided by N is the cost of one
# call after the warm-up, with the start, the warm-up, the first answers' check and the end
# cancelling out. Counts are inclusive (callgrind_annotate --inclusive=yes) of the functions
# each phase maps to (bench/callgrind.py says which); both binaries' whole totals are given
# as well. Valgrind runs the program's threads one at a time, so the counts do not depend on
# the machine's load; how the broker's threads interleave (what one commit covers) still
# varies a little between runs: run it twice to see the spread.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bins="$root/target/release"
out="$root/target/callgrind"
calls=2000
payloads=echo_small
systems=leo,leo-claim
while [ $# -gt 0 ]; do
    case "$1" in
    --bins) bins=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    --payload) payloads=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    *) echo "callgrind.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
bench=${LEO_BENCH:-$root/target/release/leo-bench}
base=200
mkdir -p "$out"
out=$(cd "$out" && pwd)

# A wrapper per binary: leo-bench kills its broker and sidecars with SIGKILL, which callgrind
# cannot outlive, so the wrapper runs the binary under valgrind in the background and, once
# the wrapper itself is killed, stops the binary with SIGTERM (a clean exit dumps the counts).
wrap() { # NAME REAL DIR
    cat >"$3/$1" <<EOF
#!/bin/sh
exec 3<&0
valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="\$CG_OUT/$1.%p" "$2" "\$@" <&3 &
child=\$!
me=\$\$
( while kill -0 \$me 2>/dev/null; do sleep 0.2; done; kill -TERM \$child 2>/dev/null ) </dev/null >/dev/null 2>&1 &
wait \$child
EOF
    chmod +x "$3/$1"
}

for sys in $(echo "$systems" | tr , ' '); do
    for payload in $(echo "$payloads" | tr , ' '); do
        for n in $base $((base + calls)); do
            run="$out/$sys-$payload-$n"
            rm -rf "$run"
            mkdir -p "$run/bin"
            wrap leo "$bins/leo" "$run/bin"
            wrap leo-mcp "$bins/leo-mcp" "$run/bin"
            echo "callgrind: $sys $payload, $n calls (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
            CG_OUT="$run" "$bench" --only relay --systems "$sys" --payloads "$payload" \
                --calls "$n" --concurrency 1 --throughput-calls 10 \
                --baseline "cg=$run/bin" --out "$run/report.md" >"$run/bench.log" 2>&1
            # The wrappers' watchdogs stop the binaries within a second; wait for the dumps.
            sleep 3
            while pgrep -f "callgrind-out-file=$run/" >/dev/null 2>&1; do sleep 1; done
        done
        python3 "$root/bench/callgrind.py" "$out/$sys-$payload-$base" \
            "$out/$sys-$payload-$((base + calls))" "$calls" "$sys $payload"
    done
done
