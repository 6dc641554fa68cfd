#!/usr/bin/env bash
# Headless Chromium for the `aloft report` browser tests (tests/report): Debian's package, driven by
# Playwright (from PyPI, in the dev extra). Needs root (apt); skips the install when Chromium is there.
set -euo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q chromium >/dev/null
chromium --version
