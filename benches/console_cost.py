"""What the admin console costs the gateway, beside a Prometheus scrape.

The gateway (release build) fronts U demo upstreams over stdio and T tenants
(each seeing every upstream), after some calls so that every series exists.
Then, on one keep-alive connection to the admin listener, it is asked N
times each: `/metrics` (a scrape), `/ui/api/upstreams` and
`/ui/api/tenants/t0` (the polls of the two busiest views), and `/ui/`
(a whole page). The gateway's CPU time per request comes from /proc,
less what it spends idle over the same wall time (its one-second sampler
included). An open page polls once per `refresh_ms` (2 s by default).

    cargo build --release
    python3 benches/console_cost.py [N] [U] [T]     # 500 10 20 by default
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive, cpu_seconds, free_port, stop, wait_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", "release", "mcp-gateway")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
U = int(sys.argv[2]) if len(sys.argv) > 2 else 10
T = int(sys.argv[3]) if len(sys.argv) > 3 else 20
TOKEN = "bench-admin-token"


class Admin:
    """One keep-alive connection to the admin listener, with the token."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def get(self, path):
        self.s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(rest) < length:
            rest += self.s.recv(65536)
        self.buf = rest[length:]
        status = int(head.split(b" ")[1])
        assert status == 200, (path, status)
        return length


def config(agent, admin):
    ups = "\n".join(
        f"  u{i}: {{stdio: {{command: {json.dumps(BIN)}, args: [demo-upstream, --name, u{i}, --test-tools]}}}}"
        for i in range(U))
    names = ", ".join(f"u{i}" for i in range(U))
    tenants = "\n".join(f"  t{i}: {{api_keys: [k{i}], upstreams: [{names}]}}" for i in range(T))
    return (f"gateway: {{listen: \"127.0.0.1:{agent}\", admin_listen: \"127.0.0.1:{admin}\", "
            f"admin_token: {TOKEN}}}\nupstreams:\n{ups}\ntenants:\n{tenants}\n")


def per_request(pid, admin, path):
    """CPU microseconds the gateway spends per request of `path`, less idle."""
    conn = Admin(admin)
    conn.get(path)
    size = 0
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    for _ in range(N):
        size = conn.get(path)
    cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - wall0
    time.sleep(wall)
    idle0 = cpu_seconds(pid)
    time.sleep(wall)
    idle = cpu_seconds(pid) - idle0
    return max(cpu - idle, 0) / N * 1e6, size


def main():
    agent, admin = free_port(), free_port()
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "gw.yaml")
    with open(path, "w") as f:
        f.write(config(agent, admin))
    gw = subprocess.Popen([BIN, "serve", "--config", path], stderr=subprocess.DEVNULL)
    try:
        wait_port(agent)
        wait_port(admin)
        time.sleep(3)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                           "params": {"id": "mcp://gateway/u0/u0/tools/echo:v1", "arguments": {"text": "x"}}}).encode()
        for t in range(T):
            c = KeepAlive(("127.0.0.1", agent), f"k{t}", body)
            for _ in range(10):
                assert c.call() == 200
        print(f"{U} upstreams, {T} tenants; {N} requests each; gateway CPU per request, less idle:")
        rows = []
        for path in ["/metrics", "/ui/api/upstreams", "/ui/api/tenants/t0", "/ui/api/tenants", "/ui/"]:
            us, size = per_request(gw.pid, admin, path)
            rows.append((path, us, size))
            print(f"  {path:<22} {us:8.0f} us  {size:>8} bytes")
        scrape = rows[0][1]
        poll = max(r[1] for r in rows[1:4])
        print(f"an open page polling every 2 s: {poll / 2:.0f} us of CPU a second; "
              f"a scrape every second: {scrape:.0f} us ({poll / 2 / scrape:.2f}x)")
    finally:
        stop([gw])


if __name__ == "__main__":
    main()
