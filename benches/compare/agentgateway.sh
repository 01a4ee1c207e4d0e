#!/usr/bin/env bash
# agentgateway for the comparison, built from its source at a pinned tag:
# installs target/bench-tools/bin/agentgateway, or says why it cannot.
#
# What the build needs (read at the tag): its repository and the git
# dependencies its Cargo.lock pins, which Cargo fetches from GitHub and
# GitLab (schemars github.com/howardjohn/schemars@f3e45a59, http-serde
# gitlab.com/howardjohn/http-serde@c2e482be, wiremock-rs
# github.com/howardjohn/wiremock-rs@79e5f488, async-openai
# github.com/howardjohn/async-openai@681e3c6e, google-cloud-auth
# github.com/googleapis/google-cloud-rust@58058110); the Rust toolchain its
# rust-toolchain.toml pins (1.97, which rustup installs on first use); a C
# compiler and make (aws-lc-sys, jemalloc). No Node: the UI feature is off.
# The release profile has LTO and one codegen unit: expect a long build.
#
# agentgateway binds every interface (it has no setting for 127.0.0.1), so
# compare.py runs it, like everything else, in a network namespace of its
# own when it is present (run.sh does, as root).
set -euo pipefail
tools=${1:-"$(cd "$(dirname "$0")/../.." && pwd)/target/bench-tools"}
TAG=v1.4.1
REPO=https://github.com/agentgateway/agentgateway

if [ -x "$tools/bin/agentgateway" ]; then
    exit 0
fi
if ! timeout 20 git ls-remote --tags "$REPO" "$TAG" 2>/dev/null | grep -q "$TAG"; then
    echo "agentgateway: $REPO is not reachable from this machine; its arms are skipped" >&2
    exit 0
fi
if ! command -v rustup >/dev/null 2>&1; then
    echo "agentgateway: rustup is needed for its pinned toolchain; its arms are skipped" >&2
    exit 0
fi
src="$tools/src/agentgateway-$TAG"
[ -d "$src" ] || git clone --depth 1 --branch "$TAG" "$REPO" "$src"
(
    cd "$src"
    export CARGO_NET_GIT_FETCH_WITH_CLI=true
    cargo build --release --locked --bin agentgateway
)
mkdir -p "$tools/bin"
cp "$src/target/release/agentgateway" "$tools/bin/agentgateway"
