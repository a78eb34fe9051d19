#!/usr/bin/env bash
# Print the path of a working `promtool` (Prometheus' rule checker), installing it when missing.
#
#   scripts/promtool.sh            the path (installs the Debian/Ubuntu `prometheus` package,
#                                  which ships promtool, when no promtool is found)
#   scripts/promtool.sh ARGS...    run promtool with ARGS
#
# The tests under tests/deploy call it to validate and unit-test the alert rules of
# deploy/k8s/monitoring, so a fresh machine gets promtool the same way it gets its servers.
set -euo pipefail

log() { printf '[promtool] %s\n' "$*" >&2; }
die() { printf '[promtool] ERROR: %s\n' "$*" >&2; exit 1; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

find_promtool() {
  local p
  for p in "${BILLING_PROMTOOL:-}" "$(command -v promtool || true)" /usr/bin/promtool; do
    if [[ -n "$p" && -x "$p" ]]; then echo "$p"; return 0; fi
  done
  return 1
}

install_promtool() {
  command -v apt-get >/dev/null || die "promtool is missing and there is no apt-get to install it (set BILLING_PROMTOOL)"
  log "installing the prometheus package (for promtool)"
  as_root apt-get update -qq >/dev/null
  # The package's service is not wanted here: only its promtool binary.
  as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
}

PROMTOOL="$(find_promtool || true)"
if [[ -z "$PROMTOOL" ]]; then
  install_promtool
  PROMTOOL="$(find_promtool)" || die "the prometheus package installed no promtool"
fi
"$PROMTOOL" --version >/dev/null 2>&1 || die "$PROMTOOL does not run"

if [[ $# -eq 0 ]]; then
  echo "$PROMTOOL"
else
  exec "$PROMTOOL" "$@"
fi
