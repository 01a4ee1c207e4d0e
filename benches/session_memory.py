#!/usr/bin/env python3
"""Memory per idle session: opens N sessions (initialize + initialized, body
left open) against the release binary on its embedded demo, on 127.0.0.1, and
reports the gateway's resident memory before and after.

    cargo build --release && python3 benches/session_memory.py [N]
"""
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
BIN = os.path.join(os.path.dirname(__file__), "..", "target", "release", "mcp-gateway")

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * N + 256)), hard))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


def open_session(addr):
    s = socket.create_connection(addr)
    s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-key\r\n"
              b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    for msg in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientCapabilities": {}}},
                {"jsonrpc": "2.0", "method": "initialized", "params": {}}):
        line = json.dumps(msg).encode() + b"\n"
        s.sendall(b"%x\r\n%s\r\n" % (len(line), line))
    got = b""
    while b'"capabilities"' not in got:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("session closed")
        got += chunk
    return s


def metric(admin, name):
    s = socket.create_connection(admin)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    m = re.search(re.escape(name).encode() + rb" (\d+)", data)
    return int(m.group(1)) if m else None


proc = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
addrs = {}
while len(addrs) < 2:
    line = json.loads(proc.stderr.readline())
    if line.get("message") in ("agent listener bound", "admin listener bound"):
        host, port = line["addr"].rsplit(":", 1)
        addrs[line["message"].split()[0]] = (host, int(port))
agent, admin = addrs["agent"], addrs["admin"]
try:
    warm = [open_session(agent) for _ in range(10)]
    time.sleep(0.5)
    before = rss_kib(proc.pid)
    sessions = [open_session(agent) for _ in range(N)]
    time.sleep(1.0)
    after = rss_kib(proc.pid)
    open_now = metric(admin, 'mcp_gateway_sessions_open{tenant="demo"}')
    print(f"sessions open (gateway's own gauge): {open_now}")
    print(f"resident memory: {before} KiB with 10 sessions, {after} KiB with {N + 10}")
    print(f"per idle session: {(after - before) * 1024 / N / 1024:.1f} KiB")
    for s in sessions + warm:
        s.close()
finally:
    proc.terminate()
    proc.wait(timeout=30)
