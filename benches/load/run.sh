#!/usr/bin/env bash
# End-to-end load benchmark, on 127.0.0.1 only: the bare upstream, the gateway,
# and nginx proxy_pass in front of the same upstream, at 1, 16 and 64 connections;
# then the gateway in front of a stdio upstream. See docs/PERFORMANCE.md.
#   benches/load/run.sh            # DURATION=10 REPS=3 by default
#   PROFILE=dist benches/load/run.sh   # the build the container image ships
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || true
  else
    echo "missing: ${need[*]} (install them from Debian's packages)" >&2
  fi
fi
command -v wrk >/dev/null 2>&1 || { echo "wrk is required" >&2; exit 1; }
cargo build --profile "${PROFILE:-release}" --quiet
exec python3 benches/load/drive.py "$@"
