#!/usr/bin/env python3
"""What logging costs a forwarded call, thread by thread: the gateway tuned
(`--workers 1`, `warn`), the same at `info` with its log to a file, the
defaults in a one-CPU cgroup at `warn` and at `info` (what the chart deploys),
and nginx with its access log, in front of one demo upstream on 127.0.0.1.
Each arm differs from another in one thing, so the difference between two
says what that thing costs. For each arm and repetition: req/s, p90, CPU per
call, and per thread (the runtime's, the log writer's) user and system time
and voluntary/involuntary context switches per call, from /proc; for a
cgroup, the periods its quota throttled.

    cargo build --release && python3 benches/load/log_cost.py
    CONNS=64 DURATION=8 REPS=3 ARMS=tuned,dflt,ngx-log python3 benches/load/log_cost.py

Needs wrk and, for its arm, nginx (benches/load/run.sh installs both when
root); the cgroup needs root. See docs/PERFORMANCE.md.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import (TICK, enter_cgroup, free_port, one_cpu_cgroup, remove_cgroups,  # noqa: E402
                    start_nginx, stop, wait_port)
from common import execute_tool as body  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "target", os.environ.get("PROFILE", "release"), "mcp-gateway")
LUA = os.path.join(ROOT, "benches", "load", "post.lua")
DURATION = int(os.environ.get("DURATION", "8"))
CONNS = int(os.environ.get("CONNS", "16"))
REPS = int(os.environ.get("REPS", "3"))
ARMS = os.environ.get("ARMS")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def threads(pid):
    """Per thread of pid: its name, user and system seconds, voluntary and involuntary switches."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except FileNotFoundError:  # ended meanwhile
            continue
        name = stat.split("(", 1)[1].rsplit(")", 1)[0]
        fields = stat.rsplit(")", 1)[1].split()
        switches = [int(re.search(rf"^{k}_ctxt_switches:\s+(\d+)", status, re.M).group(1))
                    for k in ("voluntary", "nonvoluntary")]
        out[tid] = (name, int(fields[11]) / TICK, int(fields[12]) / TICK, *switches)
    return out


def throttled(procs_file):
    """The cgroup's (periods, throttled periods) so far, or None."""
    if not procs_file:
        return None
    try:
        with open(os.path.join(os.path.dirname(procs_file), "cpu.stat")) as f:
            fields = dict(line.split() for line in f)
    except OSError:
        return None
    return int(fields.get("nr_periods", 0)), int(fields.get("nr_throttled", 0))


def measure(name, url, payload, pid, procs_file):
    before, periods = threads(pid), throttled(procs_file)
    out = subprocess.run(["wrk", "-t1", f"-c{CONNS}", f"-d{DURATION}s", "--latency", "-s", LUA, url],
                         env=dict(os.environ, BODY=payload), capture_output=True, text=True, check=True).stdout
    after, periods_after = threads(pid), throttled(procs_file)
    calls = int(re.search(r"(\d+) requests in", out).group(1))
    if re.search(r"Non-2xx or 3xx responses", out):
        raise RuntimeError(f"{name}: error responses\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p90 = re.search(r"\s90%\s+(\S+)", out).group(1)
    total, parts = 0.0, []
    for tid, (thread, user, system, vol, invol) in after.items():
        _, user0, system0, vol0, invol0 = before.get(tid, (thread, 0.0, 0.0, 0, 0))
        u, s = (user - user0) * 1e6 / calls, (system - system0) * 1e6 / calls
        total += u + s
        if u + s > 0.05:
            parts.append(f"{thread} user {u:.1f} sys {s:.1f} switches {(vol - vol0) / calls:.3f}"
                         f"/{(invol - invol0) / calls:.3f}")
    line = f"{name:10} {rps:8.0f} req/s  p90 {p90:>7}  CPU {total:5.1f} µs/call  " + " | ".join(parts)
    if periods and periods_after:
        line += f"  throttled {periods_after[1] - periods[1]}/{periods_after[0] - periods[0]} periods"
    print(line, flush=True)


def main():
    tmp = tempfile.mkdtemp(prefix="mcp-logcost-")
    procs, cgroups, arms = [], [], {}
    try:
        up_port = free_port()
        procs.append(subprocess.Popen([BIN, "demo-upstream", "--name", "up", "--http", f"127.0.0.1:{up_port}"],
                                      stdout=subprocess.DEVNULL))
        wait_port(up_port)
        tool = body("mcp://gateway/up/up/tools/echo:v1")

        def gateway(name, args, level, cgroup, log):
            port, cfg = free_port(), os.path.join(tmp, f"{name}.yaml")
            with open(cfg, "w") as f:
                f.write(f"gateway: {{listen: 127.0.0.1:{port}, admin_listen: 127.0.0.1:{free_port()}}}\n"
                        f"upstreams:\n  up: {{http: {{url: \"http://127.0.0.1:{up_port}/mcp\"}}}}\n"
                        "tenants:\n  bench: {api_keys: [bench-key], upstreams: [up]}\n")
            env = {k: v for k, v in os.environ.items() if k not in ("MCP_GATEWAY_LOG", "MCP_GATEWAY_WORKERS")}
            if level:
                env["MCP_GATEWAY_LOG"] = level
            procs_file = one_cpu_cgroup(f"-{name}") if cgroup else None
            if cgroup and not procs_file:
                print(f"{name}: no cgroup could be made (not root?); it runs on every CPU")
            cgroups.append(procs_file)
            err = open(os.path.join(tmp, f"{name}.log"), "w") if log else subprocess.DEVNULL
            p = subprocess.Popen([BIN, "serve", "--config", cfg, *args], stdout=subprocess.DEVNULL, stderr=err,
                                 env=env, preexec_fn=enter_cgroup(procs_file))
            procs.append(p)
            wait_port(port)
            arms[name] = (f"http://127.0.0.1:{port}/mcp", tool, p.pid, procs_file)

        gateway("tuned", ["--workers", "1", "--log-format", "json"], "warn", False, False)
        gateway("tuned-info", ["--workers", "1"], None, False, True)
        gateway("dflt-warn", [], "warn", True, True)
        gateway("dflt", [], None, True, True)
        if NGINX:
            url, worker = start_nginx(NGINX, tmp, "ngx-log", up_port, procs, access_log=True)
            arms["ngx-log"] = (url, body("mcp://up/tools/echo:v1"), worker, None)
        if ARMS:
            arms = {k: v for k, v in arms.items() if k in ARMS.split(",")}
        for url, payload, _, _ in arms.values():  # warm up every arm once
            subprocess.run(["wrk", "-t1", "-c4", "-d1s", "-s", LUA, url], env=dict(os.environ, BODY=payload),
                           capture_output=True, check=True)
        print(f"{CONNS} connections, {REPS} repetitions of {DURATION} s, arms rotated; "
              "per thread: µs per call, context switches per call (voluntary/involuntary)")
        names = list(arms)
        for rep in range(REPS):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                measure(name, *arms[name])
    finally:
        stop(procs)
        remove_cgroups(cgroups)
        shutil.rmtree(tmp, ignore_errors=True)


main()
