"""Helpers the benchmark scripts share: ports on 127.0.0.1 and /proc figures."""
import json
import os
import re
import socket
import subprocess
import time

TICK = os.sysconf("SC_CLK_TCK")


class KeepAlive:
    """One keep-alive HTTP/1.1 connection to the gateway: POSTs `body` to /mcp
    with `key` (and `headers`, a dict), reads the whole answer, returns its status."""

    def __init__(self, addr, key, body, headers=None):
        self.s = socket.create_connection(addr)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in (headers or {}).items())
        self.req = (b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
                    b"\r\nContent-Type: application/json\r\n" + extra +
                    b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.buf = b""

    def recv(self):
        data = self.s.recv(65536)
        if not data:
            raise ConnectionError("the gateway closed the connection")
        return data

    def call(self):
        self.s.sendall(self.req)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.recv()
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(rest) < length:
            rest += self.recv()
        self.buf = rest[length:]
        return int(head.split(b" ")[1])


def free_port():
    """A port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30):
    """Waits until something listens on 127.0.0.1:port."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def cpu_seconds(pid):
    """User plus system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid):
    """Resident memory of a process."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


def stop(procs):
    """Ends the processes this script started (newest first), killing any that linger."""
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def nginx_conf(tmp, upstream_port, port, master=True, access_log=None):
    """nginx, one worker, proxy_pass with keepalive to the upstream; written to tmp, returns its path.
    Without master, one process does everything (for valgrind). With access_log (a path), nginx
    writes its default access log there, the `combined` format unbuffered, as Debian ships it."""
    first = "worker_processes 1;" if master else "master_process off;"
    conf = os.path.join(tmp, "nginx.conf")
    log = f"access_log {access_log};" if access_log else "access_log off;"
    with open(conf, "w") as f:
        f.write(f"""{first} daemon off; pid {tmp}/nginx.pid; error_log {tmp}/nginx.err warn;
events {{ worker_connections 4096; }}
http {{ {log} client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  upstream up {{ server 127.0.0.1:{upstream_port}; keepalive 128; }}
  server {{ listen 127.0.0.1:{port}; location /mcp {{ proxy_pass http://up; proxy_http_version 1.1;
    proxy_set_header Connection ""; }} }} }}
""")
    return conf


def one_cpu_cgroup(tag=""):
    """A cgroup whose CPU quota is one CPU, as the chart's default `limits.cpu: "1"` gives a pod
    (cgroup v2 `cpu.max`, or v1's CFS quota), made when this script may (root); returns the
    path of its `cgroup.procs`, or None."""
    name = f"mcp-bench-{os.getpid()}{tag}"
    candidates = []
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        candidates.append(("/sys/fs/cgroup", {"cpu.max": "100000 100000"}))
    if os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        candidates.append(("/sys/fs/cgroup/cpu", {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}))
    for base, quota in candidates:
        path = os.path.join(base, name)
        try:
            os.mkdir(path)
            for file, value in quota.items():
                with open(os.path.join(path, file), "w") as f:
                    f.write(value)
            return os.path.join(path, "cgroup.procs")
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
    return None


def enter_cgroup(procs_file):
    """A preexec_fn that moves the new process into the cgroup whose `cgroup.procs` is procs_file
    (None: stay where it is)."""
    def enter():
        if procs_file:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))
    return enter


def remove_cgroups(procs_files):
    """Removes the cgroups one_cpu_cgroup made (their processes ended)."""
    for procs_file in filter(None, procs_files):
        try:
            os.rmdir(os.path.dirname(procs_file))
        except OSError:
            pass


def start_nginx(nginx, tmp, name, upstream_port, procs, access_log=False):
    """nginx (nginx_conf's, in tmp/name) in front of the upstream, appended to procs; returns its
    URL for /mcp and its worker's pid (the process that serves)."""
    port, home = free_port(), os.path.join(tmp, name)
    os.mkdir(home)
    conf = nginx_conf(home, upstream_port, port, access_log=access_log and os.path.join(home, "access.log"))
    ng = subprocess.Popen([nginx, "-c", conf, "-p", home], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(ng)
    wait_port(port)
    time.sleep(0.2)
    worker = int(subprocess.run(["pgrep", "-P", str(ng.pid)], capture_output=True, text=True).stdout.split()[0])
    return f"http://127.0.0.1:{port}/mcp", worker


def execute_tool(tool_id):
    """The body of an MCP v1.0 `mcp/executeTool` of the demo's echo tool."""
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                       "params": {"id": tool_id, "arguments": {"text": "hello, world"}}})
