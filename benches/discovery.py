"""What progressive discovery buys and costs, over a catalog of N tools
(`tests/fixtures/catalog_server.py N`, on the official Python SDK, behind
the gateway over stdio): the size of the direct listing against the search
listing, and how long `search_tools` takes to answer (the index built
once, by the first search), measured from the client, over loopback.

    cargo build --release
    python3 benches/discovery.py [N] [QUERIES]     # N: 1000 by default
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive, free_port, wait_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", "release", "mcp-gateway")
PYTHON = os.path.join(ROOT, "target/mcp-venv/bin/python")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
QUERIES = int(sys.argv[2]) if len(sys.argv) > 2 else 500
ASKED = ["post a message in a slack channel", "merge a pull request", "restart a kubernetes deployment",
         "refund an invoice", "what will the weather be tomorrow", "delete a jira issue",
         "list the open pull requests", "run a SQL query", "find a free time for a meeting",
         "upload a file to a bucket"]
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def post(port, key, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps(body).encode(), headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json", **HEADERS})
    with urllib.request.urlopen(request, timeout=60) as r:
        return r.read()


def main():
    tmp = tempfile.mkdtemp(prefix="mcp-discovery-")
    port = free_port()
    cfg = os.path.join(tmp, "gw.yaml")
    server = os.path.join(ROOT, "tests/fixtures/catalog_server.py")
    with open(cfg, "w") as f:
        f.write(f"gateway: {{id: gw, listen: 127.0.0.1:{port}, admin_listen: 127.0.0.1:{free_port()}}}\n"
                f"upstreams:\n  cat: {{stdio: {{command: {PYTHON}, args: [{server}, '{N}']}}, "
                "protocol: modelcontextprotocol, timeout_ms: 60000}\n"
                "tenants:\n  direct: {api_keys: [kd], upstreams: [cat]}\n"
                "  search: {api_keys: [ks], upstreams: [cat], tools: {discovery: {mode: search}}}\n")
    gw = subprocess.Popen([BIN, "serve", "--config", cfg], env=dict(os.environ, MCP_GATEWAY_LOG="warn"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=60)
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        deadline = time.time() + 120
        while len(json.loads(post(port, "kd", listing))["result"]["tools"]) < N:
            if time.time() > deadline:
                raise RuntimeError("the catalog was not listed")
            time.sleep(0.5)
        direct, search = post(port, "kd", listing), post(port, "ks", listing)
        print(f"{N} tools: direct listing {len(direct):,} bytes, search listing {len(search):,} bytes "
              f"({100 * len(search) / len(direct):.2f}%)")
        bodies = [json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "search_tools", "arguments": {"query": q}}}).encode() for q in ASKED]
        first = time.perf_counter()
        answer = json.loads(post(port, "ks", json.loads(bodies[0])))
        print(f"first search (builds the index): {(time.perf_counter() - first) * 1000:.1f} ms")
        found = answer["result"]["structuredContent"]["tools"]
        assert found, answer
        print(f"{ASKED[0]!r}: {', '.join(t['name'] for t in found)}")
        clients = [KeepAlive(("127.0.0.1", port), "ks", b, HEADERS) for b in bodies]
        took = []
        for i in range(QUERIES):
            client = clients[i % len(clients)]
            start = time.perf_counter()
            assert client.call() == 200
            took.append((time.perf_counter() - start) * 1000)
        took.sort()
        print(f"search_tools over {N} tools, {QUERIES} queries: p50 {statistics.median(took):.2f} ms, "
              f"p99 {took[int(len(took) * 0.99) - 1]:.2f} ms")
    finally:
        gw.terminate()
        gw.wait(timeout=10)


if __name__ == "__main__":
    main()
