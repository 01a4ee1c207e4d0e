#!/usr/bin/env python3
"""What a hostile tenant and a compromised upstream can make a gateway keep:
the gateway's resident memory (and its peak) before and after each of

  subscribe  96 resources/subscribe of made-up uris of 1 MiB (one session)
  listen     16 subscriptions/listen, each asking for 1 MiB of empty uris,
             their streams held open when the gateway opens them
  listing    an upstream whose tools/list is 8 pages of 2 MB (peak against
             a control gateway whose upstream lists one tool)

each against a fresh gateway process, on 127.0.0.1, in front of
tests/fixtures/hostile_upstream.py. Any binary can be measured, so that two
builds are compared in one run:

    cargo build --release && python3 benches/surface_memory.py [BINARY ...]
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HOSTILE = os.path.join(ROOT, "tests", "fixtures", "hostile_upstream.py")
SECRET = "a-session-secret-of-more-than-32-characters"


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(field + r":\s+(\d+) kB", f.read()).group(1))


def hostile(tmp, *args):
    p = subprocess.Popen([sys.executable, HOSTILE, "--log", os.path.join(tmp, "h.log"), *args],
                         stdout=subprocess.PIPE, text=True)
    url = p.stdout.readline().strip().removeprefix("listening on ")
    return p, url


def gateway(binary, tmp, url):
    path = os.path.join(tmp, "gw.yaml")
    with open(path, "w") as f:
        f.write(f"gateway: {{id: gw, session_secret: {SECRET}}}\n"
                f"upstreams:\n  h: {{http: {{url: {json.dumps(url)}}}, protocol: modelcontextprotocol, timeout_ms: 10000}}\n"
                "tenants:\n  a: {api_keys: [ka], upstreams: [h]}\n")
    p = subprocess.Popen([binary, "serve", "--config", path, "--listen", "127.0.0.1:0",
                          "--admin-listen", "127.0.0.1:0", "--log-format", "json"],
                         stderr=subprocess.PIPE, text=True)
    agent, ready = None, False
    for line in p.stderr:
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if v.get("message") == "agent listener bound":
            agent = v["addr"]
        if v.get("message") == "upstream ready" and v.get("upstream") == "h":
            ready = True
        if agent and ready:
            break
    host, port = agent.rsplit(":", 1)
    # Nobody reads its log from here on: drained so that it never blocks.
    subprocess.Popen(["cat"], stdin=p.stderr, stdout=subprocess.DEVNULL)
    return p, (host, int(port))


def post(addr, body, headers=None, keep=False):
    """POSTs `body`; returns (status, head, body) or, with `keep`, the open socket."""
    s = socket.create_connection(addr)
    data = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s.sendall(f"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ka\r\n"
              f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
              f"{extra}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, rest = got.split(b"\r\n\r\n", 1)
    if keep:
        return int(head.split()[1]), s
    m = re.search(rb"(?i)content-length: (\d+)", head)
    while m and len(rest) < int(m.group(1)):
        rest += s.recv(1 << 20)
    s.close()
    return int(head.split()[1]), head.decode(), rest


def subscribe(addr):
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "b", "version": "1"}}}
    _, head, _ = post(addr, init)
    sid = re.search(r"(?i)mcp-session-id: (\S+)", head).group(1)
    for i in range(96):
        uri = f"mcp://gw/h/resource/{i}" + "x" * (1 << 20)
        post(addr, {"jsonrpc": "2.0", "id": i, "method": "resources/subscribe", "params": {"uri": uri}},
             {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    return []


def listen(addr):
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    held = []
    for i in range(16):
        body = {"jsonrpc": "2.0", "id": i, "method": "subscriptions/listen",
                "params": {"_meta": meta, "notifications": {"resourceSubscriptions": [""] * (1 << 19)}}}
        _, s = post(addr, body, {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"},
                    keep=True)
        held.append(s)
    return held


def measure(binary, name, act, upstream_args=()):
    with tempfile.TemporaryDirectory() as tmp:
        h, url = hostile(tmp, *upstream_args)
        g, addr = gateway(binary, tmp, url)
        try:
            time.sleep(0.5)
            before = status_kib(g.pid, "VmRSS")
            held = act(addr)
            time.sleep(0.5)
            after, peak = status_kib(g.pid, "VmRSS"), status_kib(g.pid, "VmHWM")
            for s in held:
                s.close()
            return before, after, peak
        finally:
            for p in (g, h):
                p.terminate()
                p.wait()


def main():
    binaries = sys.argv[1:] or [os.path.join(ROOT, "target", "release", "mcp-gateway")]
    mib = lambda kib: f"{kib / 1024:.1f}"
    print("| binary | case | RSS before (MiB) | RSS after (MiB) | peak (MiB) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for binary in binaries:
        label = os.path.relpath(binary, ROOT)
        for name, act, args in [
            ("subscribe", subscribe, ()),
            ("listen", listen, ()),
            ("listing control", lambda addr: post(addr, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) and [], ()),
            ("listing 8 x 2 MB", lambda addr: post(addr, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) and [],
             ("--pages", "8", "--page-bytes", "2000000")),
        ]:
            before, after, peak = measure(binary, name, act, args)
            print(f"| {label} | {name} | {mib(before)} | {mib(after)} | {mib(peak)} |", flush=True)


if __name__ == "__main__":
    main()
