#!/bin/sh
# PostgreSQL round trips per relayed call, counted from the broker's side: leo-bench's
# PostgreSQL rows with `leo` run under strace, the broker's sends on connections to port 5432
# for 200 and 200+N calls; the difference divided by N. A send is one flush of the client's
# buffer, so the count is an upper bound on round trips (bench/results.md, 2026-12-05 22:40 UTC).
#
#   bench/pgtrips.sh BINDIR OUT SYSTEM N [URL]
#
# BINDIR holds release `leo`, `leo-mcp` and `leo-bench`; SYSTEM is `leo` or `leo-claim`.
set -eu
bins=$(cd "$1" && pwd); out=$2; sys=$3; n=$4
url=${5:-postgresql://root@127.0.0.1:5432/postgres}
mkdir -p "$out"
out=$(cd "$out" && pwd)
for calls in 200 $((200 + n)); do
    d="$out/$sys-$calls"
    rm -rf "$d"
    mkdir -p "$d"
    cp "$bins/leo-bench" "$bins/leo-mcp" "$d/"
    cat >"$d/leo" <<W
#!/bin/sh
exec strace -f -qq -yy -e trace=write,writev,sendto,sendmsg -o "$d/strace.\$\$" "$bins/leo" "\$@"
W
    chmod +x "$d/leo"
    "$d/leo-bench" --only relay --systems "$sys" --payloads echo_small --calls "$calls" \
        --concurrency 1 --throughput-calls 10 --postgres "$url" \
        --out "$d/report.md" >"$d/bench.log" 2>&1
    # leo-bench kills the wrappers (strace) with SIGKILL, which leaves the traced brokers
    # running: stop each (the first pid its trace names).
    for f in "$d"/strace.*; do
        p=$(head -n1 "$f" | cut -d' ' -f1)
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
done
a=$(cat "$out/$sys-200"/strace.* | grep -c ':5432]>' || true)
b=$(cat "$out/$sys-$((200 + n))"/strace.* | grep -c ':5432]>' || true)
echo "$sys: $(( (b - a) * 100 / n )) sends to PostgreSQL per 100 calls"
