#!/usr/bin/env python3
"""mcp-gateway beside the gateways people would pick instead, in front of the
same small, fast upstream of the Model Context Protocol (the demo upstream,
`mcp-gateway demo-upstream --modelcontext`: JSON answers over Streamable
HTTP, or a stdio child of each proxy).

Arms: the bare upstream (HTTP only: wrk cannot speak stdio), mcp-gateway,
mcp-proxy (crates.io), and agentgateway when `target/bench-tools/bin/agentgateway`
exists (benches/compare/agentgateway.sh builds it where GitHub is reachable).
Each proxy runs at quiet settings (warnings only) and at its defaults, both
eras (a handshake-era client with a session per connection where the
product issues one; a 2026-07-28 client with its headers and `_meta`), at
1, 16 and 64 connections. Each proxy is pinned to a core of its own; the
upstream and wrk share the other one. wrk is a closed-loop generator: each
connection sends its next request when the last one is answered, so the
figures are those of a saturated proxy at that concurrency, not of an open
arrival rate.

Every answer is checked by the wrk script, and every arm's calls are counted
at the upstream (its `calls` tool) and must match what wrk saw. Arms rotate
within each round; a proxy's CPU per call is its own process's user+system
time over the calls the upstream counted; ratios to mcp-gateway are paired
(per round, same cell), and their median is reported.

    bash benches/compare/run.sh          # installs, builds, then runs this
    DURATION=5 ROUNDS=3 CONNS=1,16,64 python3 benches/compare/compare.py

Results: target/bench-compare/results.json and report.md
(`python3 benches/compare/compare.py report` prints the tables again).
"""
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import free_port, wait_port  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("BIN") or os.path.join(ROOT, "target", "release", "mcp-gateway")
TOOLS = os.path.join(ROOT, "target", "bench-tools", "bin")
OUT = os.path.join(ROOT, "target", "bench-compare")
DURATION = int(os.environ.get("DURATION", "5"))
WARMUP = int(os.environ.get("WARMUP", "1"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONNS = [int(c) for c in os.environ.get("CONNS", "1,16,64").split(",")]
ERAS = os.environ.get("ERAS", "2025-11-25,2026-07-28").split(",")
TRANSPORTS = os.environ.get("TRANSPORTS", "http,stdio").split(",")
SETTINGS = os.environ.get("SETTINGS", "quiet,default").split(",")
ONLY = set(filter(None, os.environ.get("PRODUCTS", "").split(",")))
STATELESS = "2026-07-28"
# mcp-gateway's own MCP v1.0 path (an MCP v1.0 agent, the demo upstream in
# MCP v1.0), over HTTP: the figure the official path's cost is held to.
V1 = "MCP v1.0"
V1_ECHO = "mcp://gw/up/up/tools/echo:v1"
WITH_V1 = os.environ.get("V1", "1") == "1"
TEXT = "bench-echo"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The proxy's core, and the one the upstream and wrk share.
CORES = os.cpu_count() or 1
PROXY_CORE, REST_CORE = ("1", "0") if CORES >= 2 else ("0", "0")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for k in kids:
            found += [k, *descendants(k)]
    return found


def pin(pid, core):
    subprocess.run(["taskset", "-a", "-p", "-c", core, str(pid)], check=True, stdout=subprocess.DEVNULL)


class Client:
    """A client of the Model Context Protocol over Streamable HTTP, in one era:
    what the driver uses to open sessions, find the tool's name, and read the
    upstream's count (not the measured path: wrk is)."""

    def __init__(self, port, path, era, auth=None):
        self.port, self.path, self.era, self.auth = port, path, era, auth
        self.session = None
        self.next_id = 1

    def headers(self, method=None, name=None):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.auth:
            h["Authorization"] = f"Bearer {self.auth}"
        if self.era == STATELESS:
            h["MCP-Protocol-Version"] = STATELESS
            if method:
                h["Mcp-Method"] = method
            if name:
                h["Mcp-Name"] = name
        elif self.session is not None:
            h["MCP-Protocol-Version"] = self.era
        if self.session:
            h["Mcp-Session-Id"] = self.session
        return h

    def post(self, body, headers):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("POST", self.path, json.dumps(body), headers)
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read().decode()
        finally:
            c.close()

    def open(self):
        if self.era == STATELESS:
            return self
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": self.era, "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}}}
        status, headers, text = self.post(body, self.headers())
        if status != 200:
            raise RuntimeError(f"initialize: {status} {text[:300]}")
        self.session = headers.get("mcp-session-id", "")
        status, _, text = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, self.headers())
        if status not in (200, 202):
            raise RuntimeError(f"notifications/initialized: {status} {text[:300]}")
        return self

    def request(self, method, params, name=None):
        self.next_id += 1
        params = dict(params)
        if self.era == STATELESS:
            params["_meta"] = {"io.modelcontextprotocol/protocolVersion": STATELESS,
                               "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        status, headers, text = self.post(body, self.headers(method, name))
        for message in messages(headers.get("content-type", ""), text):
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
        raise RuntimeError(f"{method}: no answer ({status}): {text[:300]}")


def messages(content_type, text):
    if content_type.startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return [json.loads(text)] if text.strip() else []


def tool_named(client, suffix):
    tools = client.request("tools/list", {})["tools"]
    names = [t["name"] for t in tools]
    for n in names:
        if n == suffix or n.endswith(("/" + suffix, "_" + suffix, "." + suffix)):
            return n
    raise RuntimeError(f"no tool named like {suffix!r} in {names}")


class Product:
    """One proxy process (or the bare upstream) serving one transport at one setting."""

    def __init__(self, name, setting, transport, port, path, proc, auth=None, upstream_port=None):
        self.name, self.setting, self.transport = name, setting, transport
        self.port, self.path, self.proc, self.auth = port, path, proc, auth
        self.upstream_port = upstream_port
        self.label = name if name == "upstream" else f"{name} ({setting})"

    def client(self, era):
        return Client(self.port, self.path, era, self.auth).open()


def start(argv, env=None, core=PROXY_CORE, log=None):
    proc = subprocess.Popen(["taskset", "-c", core, *argv], env=dict(os.environ, **(env or {})),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=log or subprocess.DEVNULL, start_new_session=True)
    return proc


# The upstream as each proxy's stdio child runs it.
CHILD = ["demo-upstream", "--name", "up", "--modelcontext"]


def serve(tmp, name, setting, transport, port, config, file, argv, env=None, path="/mcp", auth=None):
    """Writes a product's config to `file` in `tmp`, runs `argv` + [its path]
    on the proxy's core, and waits for its port."""
    cfg = os.path.join(tmp, f"{setting}-{transport}-{file}")
    with open(cfg, "w") as f:
        f.write(config)
    proc = start([*argv, cfg], env)
    wait_port(port, timeout=60)
    return Product(name, setting, transport, port, path, proc, auth=auth)


def start_gateway(tmp, setting, transport, up_url, v1=False):
    port = free_port()
    upstream = (f"{{http: {{url: '{up_url}'}}}}" if v1
                else f"{{http: {{url: '{up_url}'}}, protocol: modelcontextprotocol}}" if transport == "http"
                else f"{{stdio: {{command: {BIN}, args: [{', '.join(CHILD)}]}}, protocol: modelcontextprotocol}}")
    config = (f"gateway: {{id: gw, listen: 127.0.0.1:{port}, admin_listen: 127.0.0.1:{free_port()}}}\n"
              f"upstreams:\n  up: {upstream}\n"
              "tenants:\n  bench: {api_keys: [bench-key], upstreams: [up]}\n")
    env = {"MCP_GATEWAY_LOG": "warn"} if setting == "quiet" else {}
    return serve(tmp, "mcp-gateway", setting, transport, port, config, "gw-v1.yaml" if v1 else "gw.yaml",
                 [BIN, "serve", "--config"], env, auth="bench-key")


def start_mcp_proxy(tmp, setting, transport, up_url):
    port = free_port()
    backend = (f'transport = "http"\nurl = "{up_url}"\n' if transport == "http"
               else f'transport = "stdio"\ncommand = "{BIN}"\nargs = {json.dumps(CHILD)}\n')
    observability = '[observability]\nlog_level = "warn"\n' if setting == "quiet" else ""
    config = (f'[proxy]\nname = "bench"\n[proxy.listen]\nhost = "127.0.0.1"\nport = {port}\n\n'
              f'[[backends]]\nname = "up"\n{backend}\n{observability}')
    return serve(tmp, "mcp-proxy", setting, transport, port, config, "proxy.toml",
                 [os.path.join(TOOLS, "mcp-proxy"), "--config"], path="/")


def start_agentgateway(tmp, setting, transport, up_url):
    port = free_port()
    # Its local config at v1.4.1 (read from its source; it binds every
    # interface, hence the network namespace run.sh gives the whole run).
    target = (f"mcp: {{host: '{up_url}'}}" if transport == "http"
              else f"stdio: {{cmd: {BIN}, args: [{', '.join(CHILD)}]}}")
    logging = "  logging: {level: warn}\n" if setting == "quiet" else ""
    config = (f"config:\n  enableIpv6: false\n  adminAddr: 127.0.0.1:{free_port()}\n  statsAddr: 'off'\n"
              f"  readinessAddr: 127.0.0.1:{free_port()}\n{logging}"
              f"gateways:\n  default:\n    port: {port}\n"
              f"mcp:\n  targets:\n  - name: up\n    {target}\n")
    return serve(tmp, "agentgateway", setting, transport, port, config, "agw.yaml",
                 [os.path.join(TOOLS, "agentgateway"), "-f"])


STARTERS = {"mcp-gateway": start_gateway, "mcp-proxy": start_mcp_proxy, "agentgateway": start_agentgateway}


def available():
    found = ["mcp-gateway"]
    for name in ("mcp-proxy", "agentgateway"):
        if name == "agentgateway" and os.path.exists(os.path.join(TOOLS, name)) and os.environ.get("IN_NETNS") != "1":
            print("note: agentgateway binds every interface: it runs only in a network namespace "
                  "of its own (run.sh, as root, gives the run one); its arms are skipped", file=sys.stderr)
        elif os.path.exists(os.path.join(TOOLS, name)):
            found.append(name)
        else:
            print(f"note: {name} is not installed under {TOOLS}: its arms are skipped "
                  f"(benches/compare/run.sh installs it{' where GitHub is reachable' if name == 'agentgateway' else ''})",
                  file=sys.stderr)
    return [p for p in found if not ONLY or p in ONLY]


def counted(product, era):
    """The upstream's count of calls: from an HTTP upstream's `GET /stats`,
    or through the proxy that owns the stdio child (its `calls` tool)."""
    if product.transport == "http":
        c = http.client.HTTPConnection("127.0.0.1", product.upstream_port, timeout=30)
        try:
            c.request("GET", "/stats")
            return json.loads(c.getresponse().read())["calls"]
        finally:
            c.close()
    client = product.client(era)
    name = tool_named(client, "calls")
    return client.request("tools/call", {"name": name, "arguments": {}}, name)["structuredContent"]["calls"]


def run_wrk(product, era, conns, seconds, name):
    sessions = [product.client(era).session or "" for _ in range(conns)] if era not in (STATELESS, V1) else []
    params = {"name": name, "arguments": {"text": TEXT}}
    method = "tools/call"
    if era == V1:
        method, params = "mcp/executeTool", {"id": V1_ECHO, "arguments": {"text": TEXT}}
    headers = []
    if product.auth:
        headers.append(f"Authorization: Bearer {product.auth}")
    if era == STATELESS:
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": STATELESS,
                           "io.modelcontextprotocol/clientCapabilities": {}}
        headers += [f"MCP-Protocol-Version: {STATELESS}", "Mcp-Method: tools/call", f"Mcp-Name: {name}"]
    elif any(sessions):
        headers.append(f"MCP-Protocol-Version: {era}")
    env = dict(os.environ, BODY=json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
               TARGET_PATH=product.path, EXPECT=TEXT, HEADERS="\n".join(headers), SESSIONS=",".join(sessions))
    url = f"http://127.0.0.1:{product.port}{product.path}"
    argv = ["taskset", "-c", REST_CORE, "wrk", "-t", str(conns), "-c", str(conns), "-d", f"{seconds}s",
            "--timeout", "10s", "-s", os.path.join(HERE, "call.lua"), url]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result: {out.stdout[-500:]} {out.stderr[-500:]}")
    result = json.loads(line[7:])
    result["stderr"] = out.stderr.strip()[-300:]
    return result


def measure(product, era, conns):
    name = V1_ECHO if era == V1 else tool_named(product.client(era), "echo")
    run_wrk(product, era, conns, WARMUP, name)
    pid = product.proc.pid
    before_count = counted(product, era)
    before_cpu = cpu_seconds(pid)
    result = run_wrk(product, era, conns, DURATION, name)
    cpu = cpu_seconds(pid) - before_cpu
    calls = counted(product, era) - before_count
    # wrk stops with up to one request per connection in flight: sent, not counted by it.
    complete = result["bad"] == 0 and result["errors"] == 0 and result["ok"] <= calls <= result["ok"] + conns
    seconds = result["duration_us"] / 1e6
    return {"rps": result["ok"] / seconds, "p50": result["p50"], "p90": result["p90"], "p99": result["p99"],
            "cpu_us": cpu * 1e6 / max(calls, 1), "calls": calls, "ok": result["ok"], "bad": result["bad"],
            "errors": result["errors"], "checked": complete, "wrk_stderr": result["stderr"]}


def main():
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is required (benches/compare/run.sh installs it)")
    if CORES < 2:
        print("note: one core only: the proxies share it with the upstream and wrk", file=sys.stderr)
    products = available()
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="mcp-compare-")
    procs = []
    try:
        up_port = free_port()
        upstream = start([BIN, *CHILD, "--http", f"127.0.0.1:{up_port}"], core=REST_CORE)
        procs.append(upstream)
        wait_port(up_port)
        up_url = f"http://127.0.0.1:{up_port}/mcp"
        running = {}
        for transport in TRANSPORTS:
            if transport == "http":
                running[("upstream", "-", "http")] = Product("upstream", "-", "http", up_port, "/mcp", upstream,
                                                             upstream_port=up_port)
            for name in products:
                for setting in SETTINGS:
                    p = STARTERS[name](tmp, setting, transport, up_url)
                    p.upstream_port = up_port
                    procs.append(p.proc)
                    running[(name, setting, transport)] = p
        v1_cells = []
        if WITH_V1 and "http" in TRANSPORTS:
            v1_port = free_port()
            procs.append(start([BIN, "demo-upstream", "--name", "up", "--http", f"127.0.0.1:{v1_port}"], core=REST_CORE))
            wait_port(v1_port)
            for setting in SETTINGS:
                p = start_gateway(tmp, setting, "http", f"http://127.0.0.1:{v1_port}/mcp", v1=True)
                p.name, p.label, p.upstream_port = "mcp-gateway v1", f"mcp-gateway, MCP v1.0 path ({setting})", v1_port
                procs.append(p.proc)
                running[("mcp-gateway v1", setting, "http")] = p
            v1_cells = [("http", V1, c, s) for c in CONNS for s in SETTINGS]
        time.sleep(1)
        for p in running.values():
            if p.transport == "stdio":
                # The child upstream leaves the proxy's core for the shared one.
                for kid in descendants(p.proc.pid):
                    pin(kid, REST_CORE)
        cells = [(t, e, c, s) for t in TRANSPORTS for e in ERAS for c in CONNS for s in SETTINGS] + v1_cells
        results = []
        for round_ in range(ROUNDS):
            for (transport, era, conns, setting) in cells:
                arms = [p for (n, s, t), p in running.items()
                        if t == transport and (s == setting or n == "upstream")
                        and (n == "mcp-gateway v1") == (era == V1)]
                # The bare upstream is one arm per cell, under the first setting only.
                if setting != SETTINGS[0]:
                    arms = [p for p in arms if p.name != "upstream"]
                shift = round_ % len(arms)
                for p in arms[shift:] + arms[:shift]:
                    try:
                        r = measure(p, era, conns)
                    except Exception as e:  # one product's failure is reported, not fatal
                        r = {"failed": str(e)[:500]}
                    r.update(round=round_, transport=transport, era=era, conns=conns, setting=setting,
                             product=p.name, label=p.label)
                    results.append(r)
                    shown = (f"{r['rps']:8.0f} req/s  p50 {r['p50'] / 1000:6.2f} ms  p99 {r['p99'] / 1000:6.2f} ms  "
                             f"{r['cpu_us']:6.1f} µs CPU/call{'' if r['checked'] else '  UNCHECKED: ' + json.dumps(r)}"
                             if "failed" not in r else f"FAILED: {r['failed']}")
                    print(f"round {round_} {transport:5} {era} c={conns:<3} {p.label:26} {shown}", flush=True)
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        report = tables(results)
        with open(os.path.join(OUT, "report.md"), "w") as f:
            f.write(report)
        print(report)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
        shutil.rmtree(tmp, ignore_errors=True)


def tables(results):
    """One table per transport and era: each arm's medians over the rounds,
    and its CPU per call as a paired ratio to mcp-gateway's at the same setting."""
    ok = [r for r in results if "failed" not in r]
    failed = [r for r in results if "failed" in r]
    lines = []
    eras = ERAS + ([V1] if any(r["era"] == V1 for r in ok) else [])
    for transport in TRANSPORTS:
        for era in eras:
            if not any(r["transport"] == transport and r["era"] == era for r in results):
                continue
            lines += [f"\n### {transport}, {era}\n",
                      "| conns | arm | req/s | p50 ms | p90 ms | p99 ms | CPU µs/call | CPU vs mcp-gateway | checked |",
                      "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
            for conns in CONNS:
                labels = sorted({r["label"] for r in ok if r["transport"] == transport and r["era"] == era
                                 and r["conns"] == conns}, key=lambda l: (l != "upstream", l))
                for label in labels:
                    rs = [r for r in ok if r["transport"] == transport and r["era"] == era
                          and r["conns"] == conns and r["label"] == label]
                    med = {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p90", "p99", "cpu_us")}
                    ratios = []
                    for r in rs:
                        base = next((b for b in ok if b["product"] == "mcp-gateway" and b["round"] == r["round"]
                                     and b["transport"] == transport and b["era"] == era
                                     and b["conns"] == conns and b["setting"] == r["setting"]), None)
                        if base and r["product"] != "upstream":
                            ratios.append(r["cpu_us"] / base["cpu_us"])
                    ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
                    checked = "yes" if all(r["checked"] for r in rs) else "NO"
                    lines.append(f"| {conns} | {label} | {med['rps']:,.0f} | {med['p50'] / 1000:.2f} | "
                                 f"{med['p90'] / 1000:.2f} | {med['p99'] / 1000:.2f} | {med['cpu_us']:.1f} | "
                                 f"{ratio} | {checked} |")
    official = [r for r in ok if r["product"] == "mcp-gateway" and r["transport"] == "http"]
    if any(r["era"] == V1 for r in ok) and official:
        lines += ["\n### mcp-gateway's official HTTP path against its MCP v1.0 path\n",
                  "CPU per call of mcp-gateway with a client and an upstream of the Model Context Protocol, "
                  "over that of an MCP v1.0 agent and upstream, paired per round (median):\n",
                  "| conns | setting | " + " | ".join(ERAS) + " |", "|---:|---|" + "---:|" * len(ERAS)]
        for conns in CONNS:
            for setting in SETTINGS:
                cells = []
                for era in ERAS:
                    ratios = [r["cpu_us"] / b["cpu_us"] for r in official for b in ok
                              if r["era"] == era and r["conns"] == conns and r["setting"] == setting
                              and b["product"] == "mcp-gateway v1" and b["conns"] == conns
                              and b["setting"] == setting and b["round"] == r["round"]]
                    cells.append(f"{statistics.median(ratios):.2f}" if ratios else "-")
                lines.append(f"| {conns} | {setting} | " + " | ".join(cells) + " |")
    if failed:
        lines.append("\nArms that could not run (the product refused or failed; its reason):\n")
        seen = {}
        for r in failed:
            seen.setdefault((r["transport"], r["era"], r["label"], r["failed"]), set()).add(r["conns"])
        lines += [f"- {t}, {e}, {label}, at {', '.join(map(str, sorted(c)))} connections: {why}"
                  for (t, e, label, why), c in seen.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["report"]:
        # The tables again, from the last run's results.
        with open(os.path.join(OUT, "results.json")) as f:
            print(tables(json.load(f)))
    else:
        main()
