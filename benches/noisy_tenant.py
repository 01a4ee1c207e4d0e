#!/usr/bin/env python3
"""Does a noisy tenant hurt a quiet one? The quiet tenant calls a tool at a
steady rate, alone, then while a noisy tenant fires at 10x its rate limit
(its excess is refused with 429 at the edge, before any upstream work). Both
share one stdio upstream. Reports the quiet tenant's latency percentiles in
both phases, on 127.0.0.1, against the release binary.

    cargo build --release && python3 benches/noisy_tenant.py [seconds-per-phase]
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
QUIET_RPS = 100
NOISY_QUOTA = 200
NOISY_RPS = 10 * NOISY_QUOTA
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.path.join(ROOT, "target", "release", "mcp-gateway")

CONFIG = f"""
gateway: {{listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0}}
upstreams:
  s: {{stdio: {{command: {BIN}, args: [demo-upstream, --name, s]}}}}
tenants:
  quiet: {{api_keys: [quiet-key], upstreams: [s]}}
  noisy: {{api_keys: [noisy-key], upstreams: [s], rate_limit: {{per_second: {NOISY_QUOTA}, burst: {NOISY_QUOTA}}}}}
"""
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                   "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {"text": "hello"}}}).encode()


def Conn(addr, key):
    """A keep-alive connection for `key`'s tool calls."""
    return KeepAlive(addr, key, BODY)


def paced(conn, rps, seconds, latencies=None, statuses=None):
    interval, start = 1.0 / rps, time.perf_counter()
    n = 0
    while True:
        due = start + n * interval
        now = time.perf_counter()
        if now - start >= seconds:
            return
        if due > now:
            time.sleep(due - now)
        t0 = time.perf_counter()
        status = conn.call()
        if latencies is not None:
            latencies.append((time.perf_counter() - t0) * 1e3)
        if statuses is not None:
            statuses[status] = statuses.get(status, 0) + 1
        n += 1


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    f.write(CONFIG)
proc = subprocess.Popen([BIN, "serve", "--config", f.name, "--log-format", "json"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True)
try:
    agent = None
    ready = False
    while not (agent and ready):
        line = json.loads(proc.stderr.readline())
        if line.get("message") == "agent listener bound":
            host, port = line["addr"].rsplit(":", 1)
            agent = (host, int(port))
        ready = ready or line.get("message") == "upstream ready"
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    quiet = Conn(agent, "quiet-key")
    paced(quiet, QUIET_RPS, 2.0)  # warm up
    results = {}
    for phase in ("alone", "with a noisy tenant"):
        latencies, statuses, threads = [], {}, []
        if phase != "alone":
            # 4 connections, each at a quarter of 10x the noisy tenant's quota.
            for _ in range(4):
                c = Conn(agent, "noisy-key")
                t = threading.Thread(target=paced, args=(c, NOISY_RPS / 4, SECONDS, None, statuses))
                t.start()
                threads.append(t)
        paced(quiet, QUIET_RPS, SECONDS, latencies)
        for t in threads:
            t.join()
        results[phase] = latencies
        print(f"quiet tenant {phase}: {len(latencies)} calls, p50 {pct(latencies, 50):.3f} ms, "
              f"p90 {pct(latencies, 90):.3f} ms, p99 {pct(latencies, 99):.3f} ms, mean {statistics.mean(latencies):.3f} ms")
        if statuses:
            total = sum(statuses.values())
            print(f"  noisy tenant: {total} calls in {SECONDS:.0f} s ({total / SECONDS:.0f}/s), statuses {statuses}")
    base, noisy = pct(results["alone"], 99), pct(results["with a noisy tenant"], 99)
    print(f"quiet p99 moved by {100 * (noisy - base) / base:+.1f}% ({base:.3f} ms -> {noisy:.3f} ms)")
finally:
    proc.terminate()
    proc.wait(timeout=30)
    os.unlink(f.name)
