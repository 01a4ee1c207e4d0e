#!/usr/bin/env python3
"""What one hostile tenant costs the others, on 127.0.0.1, against the release binary.

1. The gateway's CPU for one 4 MiB session message sent at once, and the same
   message dripped as 4 KiB and as 64-byte pieces (each its own chunk of a
   chunked body, so each is its own piece of the body however TCP merges them).
2. A quiet tenant calls a tool 100 times a second, alone, then while a
   hostile tenant (a) drips an endless session message, (b) opens sessions
   until it is refused, and pushes 50,000 calls through one session, (c)
   sends 4 MiB calls back to back. Reports the quiet tenant's p50 and p99 in
   each phase, the gateway's CPU and memory.

    cargo build --release && python3 benches/hostile_tenant.py [seconds-per-phase] [workers]

BIN=path/to/mcp-gateway measures another build (an older commit, say).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive, cpu_seconds, rss_mib  # noqa: E402

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
QUIET_RPS = 100
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", "release", "mcp-gateway")
WORKERS = sys.argv[2] if len(sys.argv) > 2 else None
# An older build may not know every limit: LIMITS replaces them.
LIMITS = os.environ.get("LIMITS", "max_body_bytes: 8388608, max_sessions_per_tenant: 64")

CONFIG = f"""
gateway:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
  limits: {{{LIMITS}}}
upstreams:
  s: {{stdio: {{command: {BIN}, args: [demo-upstream, --name, s]}}}}
  h: {{stdio: {{command: {BIN}, args: [demo-upstream, --name, h]}}}}
tenants:
  quiet: {{api_keys: [quiet-key], upstreams: [s]}}
  hostile: {{api_keys: [hostile-key], upstreams: [h]}}
"""
CALL = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                   "params": {"id": "mcp://gateway/s/s/tools/echo:v1", "arguments": {"text": "hello"}}})
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientCapabilities": {}}})


def connect(addr):
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def Conn(addr, key):
    """A keep-alive connection for `key`'s tool calls."""
    return KeepAlive(addr, key, CALL.encode())


def chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


def open_session(addr, key, close=False):
    """A session whose chunked body stays open; returns the socket. With
    `close`, the gateway closes the connection once the session is over."""
    s = connect(addr)
    s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
              (b"\r\nConnection: close" if close else b"") +
              b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
              chunk(INIT.encode() + b"\n"))
    return s


def drain(s, stop):
    """Reads and drops what a session answers, until `stop` is set or it ends."""
    s.settimeout(0.2)
    while not stop.is_set():
        try:
            if not s.recv(65536):
                return
        except socket.timeout:
            continue
        except OSError:
            return


def paced(conn, rps, seconds, latencies):
    interval, start, n = 1.0 / rps, time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        due = start + n * interval
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        t0 = time.perf_counter()
        conn.call()
        latencies.append((time.perf_counter() - t0) * 1e3)
        n += 1


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def message_cpu(addr, pid, piece):
    """Gateway CPU for one 4 MiB session message (`[{},{},...]`) sent `piece` bytes a chunk."""
    unit = b"{},"
    body = b"[" + unit * ((4 << 20) // len(unit) - 1) + b"{}]\n"
    s = open_session(addr, "hostile-key", close=True)
    stop = threading.Event()
    reader = threading.Thread(target=drain, args=(s, stop))
    reader.start()
    before = cpu_seconds(pid)
    t0 = time.perf_counter()
    pieces = [chunk(body[i:i + piece]) for i in range(0, len(body), piece)]
    # Written in batches: the pieces stay separate chunks of the body.
    for i in range(0, len(pieces), 256):
        s.sendall(b"".join(pieces[i:i + 256]))
    s.sendall(b"0\r\n\r\n")
    reader.join(timeout=120)
    took = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - before
    stop.set()
    s.close()
    return len(pieces), cpu, took


def drip_forever(addr, stop, rate_bytes_per_s):
    """A session that drips one endless message (`[{},{},...`) at a steady rate."""
    s = open_session(addr, "hostile-key")
    s.sendall(chunk(b"["))
    piece = chunk(b"{},")
    every = 3 / rate_bytes_per_s
    while not stop.is_set():
        try:
            s.sendall(piece)
        except OSError:
            return
        time.sleep(every)
    s.close()


def large_calls(addr, stop):
    """Stateless calls of 4 MiB, one after another, on one connection."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                       "params": {"id": "mcp://gateway/h/h/tools/echo:v1",
                                  "arguments": {"text": "x" * ((4 << 20) - 256)}}}).encode()
    c = Conn(addr, "hostile-key")
    c.req = (b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hostile-key"
             b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    while not stop.is_set():
        c.call()


def flood_sessions(addr, stop, opened, refused):
    """Opens sessions until the gateway refuses one, then holds them; one of
    them sends 50,000 calls as fast as the gateway reads them."""
    held = []
    while not stop.is_set():
        s = connect(addr)
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hostile-key\r\n"
                  b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(INIT.encode() + b"\n"))
        s.settimeout(5)
        try:
            first = s.recv(64)
        except OSError:
            first = b"no answer in 5 s"
        if not first.startswith(b"HTTP/1.1 200"):
            refused.append(first[:12])
            s.close()
            break
        held.append(s)
        opened.append(1)
    if held:
        busy = held[0]
        readers = threading.Thread(target=drain, args=(busy, stop), daemon=True)
        readers.start()
        line = CALL.replace("/s/s/", "/h/h/").encode() + b"\n"
        for i in range(0, 50_000, 500):
            if stop.is_set():
                break
            try:
                busy.sendall(chunk(line * 500))
            except OSError:
                break
    stop.wait()
    for s in held:
        s.close()


with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    f.write(CONFIG)
argv = [BIN, "serve", "--config", f.name, "--log-format", "json"] + (["--workers", WORKERS] if WORKERS else [])
proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True)
try:
    agent, ready = None, 0
    while not (agent and ready == 2):
        line = json.loads(proc.stderr.readline())
        if line.get("message") == "agent listener bound":
            host, port = line["addr"].rsplit(":", 1)
            agent = (host, int(port))
        ready += line.get("message") == "upstream ready"
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()

    print("one 4 MiB session message:")
    # PIECES=4194304,4096 leaves out the 64-byte drip (a build that re-reads
    # a message from its start per piece takes hours over it).
    for piece in [int(p) for p in os.environ.get("PIECES", "4194304,4096,64").split(",")]:
        n, cpu, took = message_cpu(agent, proc.pid, piece)
        print(f"  in {n} piece(s) of {piece} bytes: gateway CPU {cpu * 1e3:.0f} ms, {took:.2f} s wall")

    quiet = Conn(agent, "quiet-key")
    paced(quiet, QUIET_RPS, 2.0, [])  # warm up
    phases = [
        ("alone", None),
        ("beside a tenant dripping an endless message at 64 KiB/s", lambda stop: drip_forever(agent, stop, 64 << 10)),
        ("beside a tenant flooding sessions and 50,000 calls in one", None),
        ("beside a tenant sending 4 MiB calls back to back", lambda stop: large_calls(agent, stop)),
    ]
    for name, hostile in phases:
        stop, threads, opened, refused = threading.Event(), [], [], []
        if hostile:
            threads.append(threading.Thread(target=hostile, args=(stop,)))
        elif name.startswith("beside a tenant flooding"):
            threads.append(threading.Thread(target=flood_sessions, args=(agent, stop, opened, refused)))
        for t in threads:
            t.start()
        cpu0, latencies = cpu_seconds(proc.pid), []
        paced(quiet, QUIET_RPS, SECONDS, latencies)
        cpu = cpu_seconds(proc.pid) - cpu0
        rss = rss_mib(proc.pid)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        extra = f"; hostile sessions opened {len(opened)}, then {refused[0]!r}" if refused else ""
        print(f"quiet tenant {name}: {len(latencies)} calls, p50 {pct(latencies, 50):.3f} ms, "
              f"p99 {pct(latencies, 99):.3f} ms; gateway CPU {100 * cpu / SECONDS:.0f}% of a core, "
              f"RSS {rss:.1f} MiB{extra}")
        time.sleep(1)
finally:
    proc.terminate()
    proc.wait(timeout=30)
    os.unlink(f.name)
