#!/usr/bin/env python3
"""What sharing a tenant's limits through the store costs, and how close the
deployment holds them. On 127.0.0.1, against the release binary and a
redis-server of its own:

  cost     a tenant with a rate limit (too high to refuse) and a concurrency
           limit calls the demo's echo tool through 1 and 3 replicas, with
           the limits local (no store) and shared (store), arms alternated;
           CPU per call of the gateways (and of the store), p50 and p99
  hold     a tenant at `rate_limit: {per_second: R, burst: R}` offers 3R
           calls a second, spread over 3 replicas, for a while: the calls
           admitted a second, against R

    cargo build --release && python3 benches/replicas.py [seconds-per-arm] [R]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive, cpu_seconds, free_port, wait_port  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
RATE = int(sys.argv[2]) if len(sys.argv) > 2 else 200
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.path.join(ROOT, "target", "release", "mcp-gateway")
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                   "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {"text": "hello"}}}).encode()


def gateway(tmp, name, store_port, limits):
    store = f", store: {{url: \"redis://127.0.0.1:{store_port}/0\"}}" if store_port else ""
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"gateway: {{listen: 127.0.0.1:0, admin_listen: 127.0.0.1:0{store}}}\n"
                f"upstreams:\n  s: {{stdio: {{command: {BIN}, args: [demo-upstream, --name, s]}}}}\n"
                f"tenants:\n  t: {{api_keys: [t-key], upstreams: [s], {limits}}}\n")
    p = subprocess.Popen([BIN, "serve", "--config", path, "--log-format", "json", "--workers", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    agent, ready = None, False
    while not (agent and ready):
        line = json.loads(p.stderr.readline())
        if line.get("message") == "agent listener bound":
            host, port = line["addr"].rsplit(":", 1)
            agent = (host, int(port))
        ready = ready or line.get("message") == "upstream ready"
    subprocess.Popen(["cat"], stdin=p.stderr, stdout=subprocess.DEVNULL)
    return p, agent


def load(addrs, seconds, conns_per_addr=4):
    """Closed-loop calls on keep-alive connections to every address; latencies and statuses."""
    latencies, statuses, lock = [], {}, threading.Lock()
    stop = time.perf_counter() + seconds

    def run(addr):
        c = KeepAlive(addr, "t-key", BODY)
        mine, seen = [], {}
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            s = c.call()
            mine.append((time.perf_counter() - t0) * 1e3)
            seen[s] = seen.get(s, 0) + 1
        with lock:
            latencies.extend(mine)
            for k, v in seen.items():
                statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=run, args=(a,)) for a in addrs for _ in range(conns_per_addr)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, statuses


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else float("nan")


def main():
    if not os.path.exists(BIN):
        sys.exit("build the release binary first: cargo build --release")
    if not shutil.which("redis-server"):
        sys.exit("redis-server is needed (apt-get install redis-server)")
    tmp = tempfile.mkdtemp()
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    wait_port(port)
    try:
        print("| arm | replicas | calls | CPU per call (µs, gateways) | store CPU per call (µs) | p50 (ms) | p99 (ms) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        limits = "rate_limit: {per_second: 1000000, burst: 1000000}, max_concurrency: 1000"
        for round_ in range(2):
            for replicas in (1, 3):
                for shared in (False, True):
                    procs = [gateway(tmp, f"g{i}", port if shared else None, limits) for i in range(replicas)]
                    time.sleep(1.5)  # every replica seen alive
                    load([a for _, a in procs], 1.0)  # warm-up
                    cpu0 = [cpu_seconds(p.pid) for p, _ in procs]
                    store0 = cpu_seconds(redis.pid)
                    lat, st = load([a for _, a in procs], SECONDS)
                    cpu = sum(cpu_seconds(p.pid) - c for (p, _), c in zip(procs, cpu0))
                    store_cpu = cpu_seconds(redis.pid) - store0
                    calls = st.get(200, 0)
                    print(f"| {'shared' if shared else 'local'} (round {round_ + 1}) | {replicas} | {calls} | "
                          f"{cpu / max(calls, 1) * 1e6:.1f} | {store_cpu / max(calls, 1) * 1e6:.2f} | "
                          f"{pct(lat, 50):.3f} | {pct(lat, 99):.3f} |", flush=True)
                    for p, _ in procs:
                        p.terminate()
                        p.wait()
        # How close three replicas hold a rate.
        limits = f"rate_limit: {{per_second: {RATE}, burst: {RATE}}}"
        procs = [gateway(tmp, f"h{i}", port, limits) for i in range(3)]
        time.sleep(1.5)
        load([a for _, a in procs], 1.0)
        time.sleep(1.0)  # the burst back
        lat, st = load([a for _, a in procs], SECONDS, conns_per_addr=2)
        admitted = st.get(200, 0)
        print(f"\nheld: {admitted} admitted in {SECONDS:.0f} s across 3 replicas at rate {RATE}/s, burst {RATE}: "
              f"{admitted / SECONDS:.1f}/s (at most {RATE + RATE / SECONDS:.1f}/s with the burst); "
              f"refused {st.get(429, 0)}")
        for p, _ in procs:
            p.terminate()
            p.wait()
    finally:
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    main()
