#!/usr/bin/env bash
# Installs what the test suite needs outside Python: Debian's chromium (for the browser tests).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "chromium is missing: install Debian's 'chromium' package (sudo apt-get install -y chromium)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends chromium >/dev/null
}
command -v chromium >/dev/null
