#!/usr/bin/env bash
# One connection, the gateway and nginx side by side in front of the same demo
# upstream, alternating ROUNDS times (5 s each): wrk's requests/s and p50, and
# `perf stat` of the serving process (CPU time, context switches). A closer
# look at the one-connection row of run.sh; 127.0.0.1 only.
#   cargo build --release && benches/load/one_connection.sh     # ROUNDS=2 by default
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/${PROFILE:-release}/mcp-gateway}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
for tool in wrk perf bc "$NGINX"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "needs $tool (Debian: wrk, linux-perf, bc, nginx-light)" >&2; exit 1; }
done
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; exit 1; }
UP=$(port); GP=$(port); AP=$(port); NP=$(port)
"$BIN" demo-upstream --name up --http "127.0.0.1:$UP" >/dev/null & pids+=($!)
wait_port "$UP"
printf 'gateway: {listen: 127.0.0.1:%s, admin_listen: 127.0.0.1:%s}\nupstreams:\n  up: {http: {url: "http://127.0.0.1:%s/mcp"}}\ntenants:\n  bench: {api_keys: [bench-key], upstreams: [up]}\n' \
  "$GP" "$AP" "$UP" > "$T/gateway.yaml"
MCP_GATEWAY_LOG=warn "$BIN" serve --config "$T/gateway.yaml" --workers 1 >/dev/null 2>&1 & GPID=$!; pids+=($GPID)
cat > "$T/nginx.conf" <<EOC
master_process off; daemon off; pid $T/nginx.pid; error_log $T/nginx.err warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $T; proxy_temp_path $T; fastcgi_temp_path $T; uwsgi_temp_path $T; scgi_temp_path $T;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server { listen 127.0.0.1:$NP; location /mcp { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
EOC
"$NGINX" -c "$T/nginx.conf" -p "$T" & NPID=$!; pids+=($NPID)
wait_port "$GP"; wait_port "$NP"
for _ in $(seq "${ROUNDS:-2}"); do
  for arm in gateway nginx; do
    if [ "$arm" = gateway ]; then P=$GP; PID=$GPID; TOOL=mcp://gateway/up/up/tools/echo:v1
    else P=$NP; PID=$NPID; TOOL=mcp://up/tools/echo:v1; fi
    cat > "$T/post.lua" <<EOL
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"mcp/executeTool","params":{"id":"$TOOL","arguments":{"text":"hello, world"}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
EOL
    perf stat -e task-clock,context-switches -p "$PID" -o "$T/stat.txt" -- sleep 5 & STAT=$!
    wrk -t1 -c1 -d5s --latency -s "$T/post.lua" "http://127.0.0.1:$P/mcp" > "$T/wrk.txt"
    wait "$STAT"
    rps=$(awk '/Requests\/sec/ {print $2}' "$T/wrk.txt")
    p50=$(awk '$1 == "50%" {print $2}' "$T/wrk.txt")
    ms=$(awk '/task-clock/ {gsub(",", "", $1); print $1}' "$T/stat.txt")
    cs=$(awk '/context-switches/ {gsub(",", "", $1); print $1}' "$T/stat.txt")
    printf '%-8s req/s %9s  p50 %8s  CPU %6.1f us/req  context switches %5.2f/req\n' \
      "$arm" "$rps" "$p50" "$(echo "$ms * 1000 / ($rps * 5)" | bc -l)" "$(echo "$cs / ($rps * 5)" | bc -l)"
  done
done
