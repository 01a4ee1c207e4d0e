#!/usr/bin/env python3
"""A live MCP session against the gateway, printing every line as it arrives
while the request body stays open (curl cannot: it reads the answer only after
it has sent the whole body).

    python3 examples/live_session.py [http://127.0.0.1:8080/mcp] [api-key] [seconds]

It sends initialize (trace on), initialized and mcp/listTools, then keeps the
session open for the given seconds (default 30): run a tool that changes a
resource meanwhile and its mcp/resourceDidChange shows up here.
"""
import json
import socket
import sys
import time
from urllib.parse import urlparse

url = urlparse(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp")
key = sys.argv[2] if len(sys.argv) > 2 else "demo-key"
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0

s = socket.create_connection((url.hostname, url.port or 80))
s.sendall(f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {key}\r\n"
          "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())


def send(msg):
    line = json.dumps(msg).encode() + b"\n"
    s.sendall(b"%x\r\n%s\r\n" % (len(line), line))


send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientCapabilities": {}, "trace": "on"}})
send({"jsonrpc": "2.0", "method": "initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "mcp/listTools"})
deadline = time.time() + seconds
buf = b""
head_done = False
while time.time() < deadline:
    s.settimeout(max(0.1, deadline - time.time()))
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        break
    if not chunk:
        break
    buf += chunk
    if not head_done and b"\r\n\r\n" in buf:
        head, buf = buf.split(b"\r\n\r\n", 1)
        print(head.decode().splitlines()[0])
        head_done = True
    # Chunked framing: <hex size>\r\n<data>\r\n; each data chunk holds whole lines.
    while head_done and b"\r\n" in buf:
        size, rest = buf.split(b"\r\n", 1)
        n = int(size, 16)
        if len(rest) < n + 2:
            break
        for line in rest[:n].decode().splitlines():
            print(line[:200] + ("..." if len(line) > 200 else ""))
        buf = rest[n + 2:]
s.sendall(b"0\r\n\r\n")
s.close()
