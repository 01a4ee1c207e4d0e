#!/usr/bin/env python3
"""User-space instructions per forwarded mcp/executeTool, counted by valgrind's
callgrind: the gateway (one worker) and nginx (proxy_pass with keepalive), each
in front of the same HTTP demo upstream, on 127.0.0.1.

CPU time per request on a shared 2-core VM moves by 20-30% from run to run;
an instruction count does not, so this is how a change to the gateway's own
work is judged (the kernel's share, the same system calls for both, is not
counted here; see docs/PERFORMANCE.md).

    cargo build --release && python3 benches/load/instructions.py [N]
    GATEWAY_LOG=info python3 benches/load/instructions.py   # with audit lines, as deployed

valgrind (Debian package `valgrind`) and, for its arms, nginx must be installed.
System calls are not counted: nginx's access log costs a write(2) per request,
the gateway's log writer one per batch of lines (see benches/load/run.sh).
"""
import glob
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import free_port, nginx_conf, wait_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# PROFILE=dist measures the build the container image ships (see Cargo.toml).
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", os.environ.get("PROFILE", "release"), "mcp-gateway")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)






def count(name, argv, port, tool, tmp):
    """Starts argv under callgrind, warms up, counts N calls, returns instructions per call."""
    out = os.path.join(tmp, f"{name}.cg")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, MCP_GATEWAY_LOG=os.environ.get("GATEWAY_LOG", "warn")))
    try:
        wait_port(port)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                           "params": {"id": tool, "arguments": {"text": "hello, world"}}})
        headers = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def calls(n):
            for _ in range(n):
                conn.request("POST", "/mcp", body=body, headers=headers)
                answer = conn.getresponse().read()
                if b'"hello, world"' not in answer:
                    raise RuntimeError(f"{name} does not answer the call: {answer[:200]!r}")

        calls(300)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
        calls(N)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
        time.sleep(1)
        dumps = [d for d in glob.glob(out + ".*")]
        with open(max(dumps, key=os.path.getmtime)) as f:
            total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
        return total / N
    finally:
        proc.terminate()
        proc.wait()


def main():
    if not shutil.which("valgrind"):
        sys.exit("valgrind is required (Debian package valgrind)")
    tmp = tempfile.mkdtemp(prefix="mcp-instr-")
    upstream = None
    try:
        up_port = free_port()
        upstream = subprocess.Popen([BIN, "demo-upstream", "--name", "up", "--http", f"127.0.0.1:{up_port}"],
                                    stdout=subprocess.DEVNULL)
        wait_port(up_port)
        gw_port = free_port()
        cfg = os.path.join(tmp, "gateway.yaml")
        with open(cfg, "w") as f:
            f.write(f"gateway: {{listen: 127.0.0.1:{gw_port}, admin_listen: 127.0.0.1:{free_port()}}}\n"
                    f"upstreams:\n  up: {{http: {{url: \"http://127.0.0.1:{up_port}/mcp\"}}}}\n"
                    "tenants:\n  bench: {api_keys: [bench-key], upstreams: [up]}\n")
        gw = count("gateway", [BIN, "serve", "--config", cfg, "--workers", "1", "--log-format", "json"],
                   gw_port, "mcp://gateway/up/up/tools/echo:v1", tmp)
        print(f"gateway: {gw:,.0f} user-space instructions per call ({N} calls)")
        if NGINX:
            # nginx without a log, and with its access log (`combined`, unbuffered, as shipped):
            # compare the gateway at warn with the first, at info (audit lines) with the second.
            for name, log in (("nginx", None), ("nginx, access log", os.path.join(tmp, "access.log"))):
                ng_port = free_port()
                conf = nginx_conf(tmp, up_port, ng_port, master=False, access_log=log)
                ng = count("nginx", [NGINX, "-c", conf, "-p", tmp], ng_port, "mcp://up/tools/echo:v1", tmp)
                print(f"{name}: {ng:,.0f} user-space instructions per call ({N} calls); gateway/nginx {gw / ng:.2f}")
        else:
            print("nginx: not installed; its arm is skipped")
    finally:
        if upstream:
            upstream.terminate()
            upstream.wait()
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept: {tmp}")


main()
