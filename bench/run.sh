#!/bin/sh
# The whole benchmark in one command: the Python baselines' environments, the TypeScript
# baseline's packages, the release builds of leo, leo-mcp and leo-bench (next to each other, as
# leo-bench expects), the run.
# Arguments go to leo-bench (e.g. --quick, --only relay). Writes bench/results.md.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bench/python/setup.sh ||
    echo "bench: no Python baselines; leo-bench reports (b) and (c) as skipped" >&2
if command -v npm >/dev/null 2>&1; then
    npm ci --prefix bench/typescript --no-audit --no-fund --silent ||
        echo "bench: no TypeScript baseline; leo-bench reports (d) as skipped" >&2
fi
cargo build --release -p leo-cli -p leo-mcp -p leo-bench
target_dir=${CARGO_TARGET_DIR:-target}
exec "$target_dir/release/leo-bench" "$@"
