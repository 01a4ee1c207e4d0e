#!/usr/bin/env python3
"""Listing latency and gateway memory as upstreams and tools grow, end to end on
127.0.0.1: U real HTTP demo upstreams (separate processes) with T generated
tools each, one gateway in front of them all, one tenant that sees them all.

For each (U, T) it reports: how long the gateway took to be ready with every
catalog loaded, its resident memory then, and the latency of `mcp/listTools`
through it (whole answer read by a keep-alive client; median and p90), with the
size of that answer and the gateway's CPU time per listing.

    cargo build --release && python3 benches/scale.py            # the default grid
    python3 benches/scale.py 10x100 100x1000                     # chosen points
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_seconds, free_port, rss_mib, stop, wait_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "target", "release", "mcp-gateway")
GRID = ["1x100", "1x1000", "10x100", "10x1000", "100x100", "100x1000"]










LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/listTools"}).encode()
HEADERS = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}


def list_tools(conn):
    conn.request("POST", "/mcp", body=LIST, headers=HEADERS)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
    return body


def point(upstreams, tools):
    tmp = tempfile.mkdtemp(prefix="mcp-scale-")
    procs = []
    try:
        ports = []
        for i in range(upstreams):
            port = free_port()
            procs.append(subprocess.Popen(
                [BIN, "demo-upstream", "--name", f"u{i}", "--http", f"127.0.0.1:{port}", "--extra-tools", str(tools)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port)
        for port in ports:
            wait_port(port)
        gw_port = free_port()
        cfg = os.path.join(tmp, "gateway.yaml")
        with open(cfg, "w") as f:
            f.write(f"gateway: {{listen: 127.0.0.1:{gw_port}, admin_listen: 127.0.0.1:{free_port()}}}\nupstreams:\n")
            for i, port in enumerate(ports):
                f.write(f"  u{i}: {{http: {{url: \"http://127.0.0.1:{port}/mcp\"}}}}\n")
            names = ", ".join(f"u{i}" for i in range(upstreams))
            f.write(f"tenants:\n  bench: {{api_keys: [bench-key], upstreams: [{names}]}}\n")
        started = time.monotonic()
        gw = subprocess.Popen([BIN, "serve", "--config", cfg, "--log-format", "json"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, MCP_GATEWAY_LOG="warn"))
        procs.append(gw)
        wait_port(gw_port)
        conn = http.client.HTTPConnection("127.0.0.1", gw_port, timeout=120)
        want = upstreams * (tools + 2)  # each demo upstream also lists echo and add
        while True:
            got = len(json.loads(list_tools(conn))["result"])
            if got == want:
                break
            if time.monotonic() - started > 300:
                raise RuntimeError(f"only {got} of {want} tools listed after 300 s")
            time.sleep(0.05)
        ready_s = time.monotonic() - started
        time.sleep(0.5)
        rss = rss_mib(gw.pid)
        reps = max(10, min(200, 2_000_000 // want))
        lat, size = [], 0
        cpu0 = cpu_seconds(gw.pid)
        for _ in range(reps):
            t0 = time.perf_counter()
            size = len(list_tools(conn))
            lat.append((time.perf_counter() - t0) * 1000)
        cpu_ms = (cpu_seconds(gw.pid) - cpu0) * 1000 / reps
        lat.sort()
        p90 = lat[min(len(lat) - 1, int(len(lat) * 0.9))]
        print(f"{upstreams:>4} x {tools:<5} {want:>7} tools  ready {ready_s:6.2f} s  RSS {rss:7.1f} MiB  "
              f"listing {size / 1e6:7.2f} MB: p50 {statistics.median(lat):8.2f} ms  p90 {p90:8.2f} ms  "
              f"gateway CPU {cpu_ms:7.2f} ms/listing  ({reps} listings)", flush=True)
    finally:
        stop(procs)


def main():
    points = sys.argv[1:] or GRID
    print("upstreams x tools each; the gateway with its default workers; MCP_GATEWAY_LOG=warn")
    for p in points:
        u, t = (int(x) for x in p.split("x"))
        point(u, t)


main()
