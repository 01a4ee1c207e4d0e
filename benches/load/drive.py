#!/usr/bin/env python3
"""Drives the load benchmark (see run.sh): starts the upstream, the gateway and
nginx, runs wrk against each arm in a rotating order, and prints medians."""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import (cpu_seconds, enter_cgroup, free_port, one_cpu_cgroup, remove_cgroups,  # noqa: E402
                    start_nginx, stop, wait_port)
from common import execute_tool as body  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# PROFILE=dist measures the build the container image ships (see Cargo.toml).
BIN = os.path.join(ROOT, "target", os.environ.get("PROFILE", "release"), "mcp-gateway")
LUA = os.path.join(ROOT, "benches", "load", "post.lua")
DURATION = int(os.environ.get("DURATION", "10"))
REPS = int(os.environ.get("REPS", "3"))
CONNS = [int(c) for c in os.environ.get("CONNS", "1 16 64").split()]
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def to_us(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    value, unit = float(m.group(1)), m.group(2)
    return value * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


def wrk(url, payload, conns, pid=None):
    env = dict(os.environ, BODY=payload)
    before = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{DURATION}s", "--latency", "-s", LUA, url],
                         env=env, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pid) - before if pid else None
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{url}: {errors.group(1)} error responses\n{out}")
    lat = {p: to_us(re.search(rf"\s{p}%\s+(\S+)", out).group(1)) for p in ("50", "90", "99")}
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "p50": lat["50"], "p90": lat["90"],
            "p99": lat["99"], "cpu_us": (cpu * 1e6 / requests) if cpu is not None and requests else None}


def main():
    tmp = tempfile.mkdtemp(prefix="mcp-load-")
    procs, cgroups = [], []
    try:
        up_port = free_port()
        upstream = subprocess.Popen([BIN, "demo-upstream", "--name", "up", "--http", f"127.0.0.1:{up_port}"],
                                    stdout=subprocess.DEVNULL)
        procs.append(upstream)
        wait_port(up_port)
        gw_port, stdio_port, dflt_port = free_port(), free_port(), free_port()
        def gateway(port, upstream_yaml, name, defaults=False):
            """The tuned gateway (one worker, logs at warn); with defaults, `serve` as deployed:
            its own runtime choice, logs at info with audit lines, JSON to a file."""
            cfg = os.path.join(tmp, f"{name}.yaml")
            with open(cfg, "w") as f:
                f.write(f"gateway: {{listen: 127.0.0.1:{port}, admin_listen: 127.0.0.1:{free_port()}}}\n"
                        f"upstreams:\n  up: {upstream_yaml}\ntenants:\n  bench: {{api_keys: [bench-key], upstreams: [up]}}\n")
            if defaults:
                env = {k: v for k, v in os.environ.items() if k not in ("MCP_GATEWAY_LOG", "MCP_GATEWAY_WORKERS")}
                procs_file = one_cpu_cgroup()
                cgroups.append(procs_file)
                log = open(os.path.join(tmp, f"{name}.log"), "w")
                p = subprocess.Popen([BIN, "serve", "--config", cfg], stdout=subprocess.DEVNULL, stderr=log,
                                     env=env, preexec_fn=enter_cgroup(procs_file))
                print(f"gateway at its defaults: logs at info, JSON to a file, "
                      + ("in a cgroup of one CPU (the chart's default limit)" if procs_file else
                         "on every CPU of this machine (no cgroup could be made: not root?)"))
            else:
                env = dict(os.environ, MCP_GATEWAY_LOG="warn")
                p = subprocess.Popen([BIN, "serve", "--config", cfg, "--workers", "1", "--log-format", "json"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            procs.append(p)
            wait_port(port)
            return p
        http_up = f'{{http: {{url: "http://127.0.0.1:{up_port}/mcp"}}}}'
        gw = gateway(gw_port, http_up, "http")
        dflt = gateway(dflt_port, http_up, "defaults", defaults=True)
        arms = {
            "direct": (f"http://127.0.0.1:{up_port}/mcp", body("mcp://up/tools/echo:v1"), upstream.pid),
            "gateway": (f"http://127.0.0.1:{gw_port}/mcp", body("mcp://gateway/up/up/tools/echo:v1"), gw.pid),
            "gw-dflt": (f"http://127.0.0.1:{dflt_port}/mcp", body("mcp://gateway/up/up/tools/echo:v1"), dflt.pid),
        }
        if NGINX:
            for arm, log in (("nginx", False), ("ngx-log", True)):
                url, worker = start_nginx(NGINX, tmp, arm, up_port, procs, access_log=log)
                arms[arm] = (url, body("mcp://up/tools/echo:v1"), worker)
        else:
            print("nginx: not installed and could not be installed here; its arms are skipped")
        for arm, (url, payload, _) in arms.items():  # every arm really answers the call
            r = subprocess.run(["curl", "-s", url, "-H", "Authorization: Bearer bench-key",
                                "-H", "Content-Type: application/json", "-d", payload], capture_output=True, text=True)
            if '"result":{"output":{"text":"hello, world"}}' not in r.stdout:
                raise RuntimeError(f"{arm} does not answer the call: {r.stdout[:300]}")
        for url, payload, _ in arms.values():  # warm up every arm once
            subprocess.run(["wrk", "-t1", "-c4", "-d1s", "-s", LUA, url], env=dict(os.environ, BODY=payload),
                           capture_output=True, check=True)
        results = {(a, c): [] for a in arms for c in CONNS}
        names = list(arms)
        for rep in range(REPS):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for conns in CONNS:
                for arm in order:
                    url, payload, pid = arms[arm]
                    results[(arm, conns)].append(wrk(url, payload, conns, pid))
        med = lambda xs, k: statistics.median(x[k] for x in xs) if xs and xs[0][k] is not None else float("nan")
        print(f"\n{REPS} repetitions of {DURATION} s, arms rotated; medians. CPU/req is the process serving that arm "
              "(the upstream itself for direct, nginx's worker, the gateway).")
        print(f"{'arm':8} {'conns':>5} {'req/s':>9} {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8} {'CPU µs/req':>10}")
        for conns in CONNS:
            for arm in names:
                xs = results[(arm, conns)]
                print(f"{arm:8} {conns:5d} {med(xs, 'rps'):9.0f} {med(xs, 'p50'):8.0f} {med(xs, 'p90'):8.0f} "
                      f"{med(xs, 'p99'):8.0f} {med(xs, 'cpu_us'):10.1f}")
        print()
        for conns in CONNS:
            g = med(results[("gateway", conns)], "rps")
            line = f"conns {conns:3d}: gateway/direct {g / med(results[('direct', conns)], 'rps'):.2f}"
            if "nginx" in arms:
                line += f", gateway/nginx {g / med(results[('nginx', conns)], 'rps'):.2f}"
                line += f", added p50 gateway {med(results[('gateway', conns)], 'p50') - med(results[('direct', conns)], 'p50'):.0f} µs"
                line += f" vs nginx {med(results[('nginx', conns)], 'p50') - med(results[('direct', conns)], 'p50'):.0f} µs"
            print(line)
        if "ngx-log" in arms:  # what users deploy: both with their logs on
            for conns in CONNS:
                d, n = results[("gw-dflt", conns)], results[("ngx-log", conns)]
                print(f"conns {conns:3d}, logs on: gateway at its defaults / nginx with its access log: "
                      f"req/s {med(d, 'rps') / med(n, 'rps'):.2f}, CPU per call {med(d, 'cpu_us') / med(n, 'cpu_us'):.2f}, "
                      f"p90 {med(d, 'p90'):.0f} vs {med(n, 'p90'):.0f} µs")
        # The gateway in front of a stdio child, 64 connections.
        st = gateway(stdio_port, f"{{stdio: {{command: {BIN}, args: [demo-upstream, --name, up]}}}}", "stdio")
        wait_port(stdio_port)
        time.sleep(0.5)
        r = subprocess.run(["curl", "-s", f"http://127.0.0.1:{stdio_port}/mcp", "-H", "Authorization: Bearer bench-key",
                            "-H", "Content-Type: application/json", "-d", body("mcp://gateway/up/up/tools/echo:v1")],
                           capture_output=True, text=True)
        if '"result"' not in r.stdout:
            raise RuntimeError(f"the stdio arm does not answer the call: {r.stdout[:300]}")
        s = [wrk(f"http://127.0.0.1:{stdio_port}/mcp", body("mcp://gateway/up/up/tools/echo:v1"), 64, st.pid) for _ in range(REPS)]
        stdio_rps, http_rps = med(s, "rps"), med(results[("gateway", 64)], "rps") if 64 in CONNS else float("nan")
        print(f"stdio upstream, 64 connections: {stdio_rps:.0f} req/s, p99 {med(s, 'p99'):.0f} µs, "
              f"CPU {med(s, 'cpu_us'):.1f} µs/req; stdio/HTTP-upstream throughput "
              + (f"{stdio_rps / http_rps:.2f}" if 64 in CONNS else "not compared (64 connections not in CONNS)"))
    finally:
        stop(procs)
        remove_cgroups(cgroups)
        shutil.rmtree(tmp, ignore_errors=True)


main()
