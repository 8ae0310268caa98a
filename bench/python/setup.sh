#!/bin/sh
# Creates the Python baselines' environments from PyPI (idempotent):
#   .venv/server  server.py's SDK (requirements.txt)
#   .venv/proxy   mcp-proxy, which needs mcp<2 (requirements-proxy.txt)
# leo-bench finds them here; without them it reports baselines (b) and (c) as skipped.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
for env in server proxy; do
    req="$here/requirements.txt"
    [ "$env" = proxy ] && req="$here/requirements-proxy.txt"
    venv="$here/.venv/$env"
    stamp="$venv/.installed"
    if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
        continue
    fi
    echo "bench/python: installing $env environment" >&2
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
done
