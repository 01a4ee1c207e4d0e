#!/usr/bin/env bash
# Every test, from a fresh clone: installs what the tests need (the README's
# second command, and what .ci/run runs), then `cargo test --locked --all-targets`.
#
#   bash tests/run.sh [extra cargo test arguments]
#
# What it installs, each only when missing:
# - Debian packages (as root, or it says what to install): python3 with venv,
#   Node.js with npm, chromium (the browser tests), redis-server (the replicas' store),
#   libpython3.11 (the traces tests' collector links it), iproute2 (the
#   conformance suite's network namespaces);
# - pinned from PyPI and npm (tests/fixtures/mcp-servers.txt): the official
#   Model Context Protocol SDKs and reference servers, the OpenID Connect
#   provider and the Node it runs on, Playwright for Python (the admin
#   console's browser tests drive chromium with it), under target/ (never in git);
# - the offline Kubernetes checks' Python packages (deploy/checks/requirements.txt).
# kubectl (which renders the kustomize base) has no package in Debian's or
# Ubuntu's own archives: optional; without it the base's resources are
# validated as written (the checks say so).
# Everything finishes before the first test starts.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3 python3-venv)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v prlimit >/dev/null 2>&1 || missing+=(util-linux)
# The conformance suite's servers listen on every interface: each runs in a
# network namespace of its own (unshare, util-linux), its loopback brought up.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# The traces tests' collector (rotel, from PyPI) links Python's shared runtime.
ls /usr/lib/*/libpython3.11.so.1.0 /lib/*/libpython3.11.so.1.0 >/dev/null 2>&1 || missing+=(libpython3.11)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "tests/run.sh: these packages are missing: ${missing[*]}" >&2
    echo "  install them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]}), then run this again" >&2
    exit 1
  fi
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "tests/run.sh: note: kubectl is not installed: the offline Kubernetes checks validate the kustomize" >&2
  echo "  base's resources as written instead of rendering it (install kubectl 1.27+ to render it too)" >&2
fi

# The offline Kubernetes checks (helm-python-sdk, kubernetes-validate).
venv=target/deploy-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import helm_python, kubernetes_validate' >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet -r deploy/checks/requirements.txt
fi
# The real peers, at the versions tests/fixtures/mcp-servers.txt pins:
# Python ones in a virtualenv, Node ones under target/mcp-node.
mcp_venv=target/mcp-venv
mapfile -t pip_pins < <(sed -n 's/^pip //p' tests/fixtures/mcp-servers.txt)
mapfile -t npm_pins < <(sed -n 's/^npm //p' tests/fixtures/mcp-servers.txt)
pip_ok=true
# Distribution names compared as pip normalizes them (case, - and _).
frozen=$("$mcp_venv/bin/pip" freeze 2>/dev/null | tr '[:upper:]_' '[:lower:]-' || true)
for pin in "${pip_pins[@]}"; do
  grep -qxF "$(echo "$pin" | tr '[:upper:]_' '[:lower:]-')" <<<"$frozen" || pip_ok=false
done
if ! $pip_ok; then
  rm -rf "$mcp_venv"
  python3 -m venv "$mcp_venv"
  "$mcp_venv/bin/pip" install --quiet "${pip_pins[@]}"
fi
npm_ok=true
for pin in "${npm_pins[@]}"; do
  manifest="target/mcp-node/node_modules/${pin%@*}/package.json"
  [ -f "$manifest" ] && grep -q "\"version\": \"${pin##*@}\"" "$manifest" || npm_ok=false
done
if ! $npm_ok; then
  rm -rf target/mcp-node
  npm install --silent --no-audit --no-fund --prefix target/mcp-node "${npm_pins[@]}"
fi

exec cargo test --locked --all-targets "$@"
