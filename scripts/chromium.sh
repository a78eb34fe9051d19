#!/usr/bin/env bash
# Makes sure the system's Chromium is installed for the console's browser tests (Playwright drives
# it; no browser download). Installs the Debian package when missing and we may; otherwise says
# why, and the browser tests are skipped with that reason in the test report.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then as_root=(sudo -n); else
    echo "[chromium] not installed, and installing it needs root: the browser tests will be skipped" >&2
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "[chromium] not installed and no apt-get here: the browser tests will be skipped" >&2
  exit 0
fi
echo "[chromium] installing the Debian package (once)" >&2
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq >/dev/null 2>&1 || true
if ! "${as_root[@]}" apt-get install -y -qq chromium >/dev/null 2>&1; then
  echo "[chromium] apt-get install chromium failed: the browser tests will be skipped" >&2
fi
exit 0
