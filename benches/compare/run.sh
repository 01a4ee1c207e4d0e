#!/usr/bin/env bash
# The comparison in one command, from a fresh clone: installs wrk (Debian),
# mcp-proxy (crates.io, pinned), agentgateway (from its source, pinned, only
# where GitHub is reachable), builds mcp-gateway's release binary, then runs
# benches/compare/compare.py (settings through its environment: DURATION,
# ROUNDS, CONNS, ERAS, TRANSPORTS, SETTINGS, PRODUCTS).
set -euo pipefail
cd "$(dirname "$0")/../.."

MCP_PROXY_VERSION=0.6.0
tools="$PWD/target/bench-tools"

need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
if ((${#need[@]})); then
    SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! grep -qs "\"mcp-proxy $MCP_PROXY_VERSION " "$tools/.crates.toml" || [ ! -x "$tools/bin/mcp-proxy" ]; then
    echo "installing mcp-proxy $MCP_PROXY_VERSION from crates.io (a release build: minutes)" >&2
    cargo install --locked --version "$MCP_PROXY_VERSION" --root "$tools" mcp-proxy
fi

bash benches/compare/agentgateway.sh "$tools" || true

cargo build --release --locked
if [ -x "$tools/bin/agentgateway" ] && [ "$(id -u)" = 0 ]; then
    # agentgateway binds every interface: the whole run gets a network
    # namespace of its own, with only loopback in it.
    IN_NETNS=1 exec unshare -n bash -c 'ip link set lo up && exec python3 benches/compare/compare.py'
fi
python3 benches/compare/compare.py
