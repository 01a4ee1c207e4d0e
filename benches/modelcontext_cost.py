#!/usr/bin/env python3
"""The gateway's CPU per forwarded call through an upstream of the Model
Context Protocol beside an MCP v1.0 one, over stdio and over HTTP.

Each arm is a gateway process (release build, one worker, logs at warn) in
front of one upstream: the demo upstream (MCP v1.0) or the reference server
`@modelcontextprotocol/server-everything` (its `echo` tool), the demo
upstream itself speaking the protocol (`--modelcontext`: JSON answers with
the same few headers, as quick as its MCP v1.0 self), and, for
Streamable HTTP answering JSON rather than event streams, the Python SDK
server of the tests (`tests/fixtures/mcp_sdk_server.py json`), all on
127.0.0.1. One keep-alive client calls the echo tool N times; what is
reported is the gateway process's own CPU time (user + system, /proc) per
call, so the upstreams' own cost is not in it. Arms are rotated over ROUNDS
rounds and the median is reported.

CPU time also holds what the upstream's pace costs the gateway (a slower
upstream leaves the runtime idle between calls: more parking and waking per
call, and server-everything answers in an event stream of several writes).
With INSTRUCTIONS=1 each gateway runs under valgrind's callgrind instead and
the user-space instructions per call are reported: the gateway's own work,
whatever the upstream's pace (valgrind must be installed).

    cargo build --release   # and the servers .ci/run installs under target/
    python3 benches/modelcontext_cost.py [N] [ROUNDS]
    INSTRUCTIONS=1 KEEP=1 ARMS="v1 http;modelcontextprotocol http, JSON answers" python3 benches/modelcontext_cost.py 1000
"""
import glob
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive, cpu_seconds, free_port, wait_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", os.environ.get("PROFILE", "release"), "mcp-gateway")
EVERYTHING = os.path.join(ROOT, "target/mcp-node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
LOOPBACK = os.path.join(ROOT, "tests/fixtures/loopback.cjs")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def body(tool_id, arguments):
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                       "params": {"id": tool_id, "arguments": arguments}}).encode()


INSTRUCTIONS = os.environ.get("INSTRUCTIONS") == "1"
# Each Model Context Protocol arm beside the MCP v1.0 arm of its transport.
PAIRS = [("modelcontextprotocol stdio", "v1 stdio"), ("modelcontextprotocol http", "v1 http"),
         ("modelcontextprotocol http, JSON answers", "v1 http"),
         ("modelcontextprotocol stdio, demo upstream", "v1 stdio"),
         ("modelcontextprotocol http, demo upstream", "v1 http")]


def start_gateway(tmp, name, upstream_yaml):
    port = free_port()
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.join(tmp, name)}.cg"] \
        if INSTRUCTIONS else []
    cfg = os.path.join(tmp, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(f"gateway: {{id: gw, listen: 127.0.0.1:{port}, admin_listen: 127.0.0.1:{free_port()}}}\n"
                f"upstreams:\n  up: {upstream_yaml}\n"
                "tenants:\n  bench: {api_keys: [bench-key], upstreams: [up]}\n")
    env = dict(os.environ, MCP_GATEWAY_LOG="warn")
    p = subprocess.Popen([*prefix, BIN, "serve", "--config", cfg, "--workers", "1"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, timeout=120 if INSTRUCTIONS else 30)
    return p, port


def ready_client(port, request):
    """A keep-alive client, once a call through the gateway answers with a result."""
    deadline = time.time() + (120 if INSTRUCTIONS else 30)
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/mcp", request, {"Authorization": "Bearer bench-key",
                                               "Content-Type": "application/json"})
        answer = conn.getresponse().read()
        conn.close()
        if b'"result"' in answer:
            return KeepAlive(("127.0.0.1", port), "bench-key", request)
        if time.time() > deadline:
            raise RuntimeError(f"no result through the gateway: {answer[:300]!r}")
        time.sleep(0.2)


def main():
    if not os.path.exists(EVERYTHING):
        sys.exit("server-everything is not installed under target/mcp-node (run .ci/run)")
    tmp = tempfile.mkdtemp(prefix="mcp-cost-")
    procs = []
    try:
        up_port = free_port()
        demo = subprocess.Popen([BIN, "demo-upstream", "--name", "up", "--http", f"127.0.0.1:{up_port}"],
                                stdout=subprocess.DEVNULL)
        procs.append(demo)
        # The same server speaking the protocol: the fairest measure of the
        # protocol's own path (JSON answers, the same three headers, as quick).
        mc_port = free_port()
        procs.append(subprocess.Popen([BIN, "demo-upstream", "--name", "up", "--modelcontext",
                                       "--http", f"127.0.0.1:{mc_port}"], stdout=subprocess.DEVNULL))
        ev_port = free_port()
        everything = subprocess.Popen(["node", "--require", LOOPBACK, EVERYTHING, "streamableHttp"],
                                      env=dict(os.environ, PORT=str(ev_port)),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(everything)
        sdk = subprocess.Popen([os.path.join(ROOT, "target/mcp-venv/bin/python"),
                                os.path.join(ROOT, "tests/fixtures/mcp_sdk_server.py"), "json"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(sdk)
        sdk_port = int(sdk.stdout.readline().split()[1])
        wait_port(up_port)
        wait_port(mc_port)
        wait_port(ev_port)
        wait_port(sdk_port)
        v1 = body("mcp://gw/up/up/tools/echo:v1", {"text": "hello"})
        mc = body("mcp://gw/up/tool/echo", {"message": "hello"})
        arms = {
            "v1 stdio": (f"{{stdio: {{command: {BIN}, args: [demo-upstream, --name, up]}}}}", v1),
            "modelcontextprotocol stdio": (
                f"{{stdio: {{command: node, args: [{EVERYTHING}, stdio]}}, protocol: modelcontextprotocol}}", mc),
            "v1 http": (f"{{http: {{url: 'http://127.0.0.1:{up_port}/mcp'}}}}", v1),
            "modelcontextprotocol http": (
                f"{{http: {{url: 'http://127.0.0.1:{ev_port}/mcp'}}, protocol: modelcontextprotocol}}", mc),
            "modelcontextprotocol http, JSON answers": (
                f"{{http: {{url: 'http://127.0.0.1:{sdk_port}/mcp'}}, protocol: modelcontextprotocol}}",
                body("mcp://gw/up/tool/echo", {"text": "hello"})),
            "modelcontextprotocol stdio, demo upstream": (
                f"{{stdio: {{command: {BIN}, args: [demo-upstream, --name, up, --modelcontext]}}, "
                "protocol: modelcontextprotocol}", body("mcp://gw/up/tool/echo", {"text": "hello"})),
            "modelcontextprotocol http, demo upstream": (
                f"{{http: {{url: 'http://127.0.0.1:{mc_port}/mcp'}}, protocol: modelcontextprotocol}}",
                body("mcp://gw/up/tool/echo", {"text": "hello"})),
        }
        # ARMS=name;name: only these arms (KEEP=1 keeps each callgrind dump and prints its path).
        only = [a for a in os.environ.get("ARMS", "").split(";") if a]
        if only:
            arms = {name: arm for name, arm in arms.items() if name in only}
        gateways = {}
        for name, (yaml, request) in arms.items():
            p, port = start_gateway(tmp, name.replace(" ", "-"), yaml)
            procs.append(p)
            gateways[name] = (p, port, request, ready_client(port, request))
        results = {name: [] for name in arms}
        if INSTRUCTIONS:
            for name, (p, port, request, _) in gateways.items():
                client = KeepAlive(("127.0.0.1", port), "bench-key", request)
                for _ in range(200):
                    client.call()
                out = os.path.join(tmp, name.replace(" ", "-")) + ".cg"
                subprocess.run(["callgrind_control", "-z", str(p.pid)], capture_output=True, check=True)
                for _ in range(N):
                    client.call()
                subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True, check=True)
                time.sleep(1)
                dumps = glob.glob(out + ".*")
                dump = max(dumps, key=os.path.getmtime)
                with open(dump) as f:
                    total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
                if os.environ.get("KEEP") == "1":
                    print(f"{name}: {dump}")
                print(f"{name:40} {total / N:9,.0f} user-space instructions per call")
                results[name].append(total / N)
            for arm, base in PAIRS:
                if arm not in results or base not in results:
                    continue
                ratio = results[arm][0] / results[base][0]
                print(f"{arm}: {ratio:.2f} times the instructions of {base}")
            return
        for _ in range(ROUNDS):
            for name, (p, port, request, _) in gateways.items():
                # A fresh connection each round: the gateway closes one left idle
                # for header_read_timeout_ms (10 s) while the other arms run.
                client = KeepAlive(("127.0.0.1", port), "bench-key", request)
                client.call()
                before = cpu_seconds(p.pid)
                for _ in range(N):
                    client.call()
                results[name].append((cpu_seconds(p.pid) - before) * 1e6 / N)
                client.s.close()
        for name, figures in results.items():
            print(f"{name:40} {statistics.median(figures):6.1f} µs of gateway CPU per call "
                  f"(rounds: {', '.join(f'{f:.1f}' for f in figures)})")
        for arm, base in PAIRS:
            if arm not in results or base not in results:
                continue
            ratio = statistics.median(results[arm]) / statistics.median(results[base])
            print(f"{arm}: {ratio:.2f} times the CPU of {base}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
