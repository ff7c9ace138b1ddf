#!/usr/bin/env bash
# Installs Debian's chromium for the headless HTML report test, when it is missing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "chromium is missing and this is not root: install Debian's 'chromium' package, then rerun" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
chromium --version
