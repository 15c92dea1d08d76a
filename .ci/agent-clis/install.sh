#!/usr/bin/env bash
# Installs the pinned real agent CLIs (Claude Code, Codex, Gemini) into
# .ci/agent-clis/node_modules/.bin/ for tests/cli/real_clis.rs.
#
# - Idempotent: a stamp holding the lockfile's hash skips `npm ci` (which
#   wipes node_modules and rewrites ~740 MB) when nothing changed.
# - Bounded: `npm ci` gets AGENT_CLIS_INSTALL_TIMEOUT seconds (default 600).
# - Quiet: prints one line on success; npm's output only on failure.
# - Checks: every binary must answer `--version` (Claude Code's postinstall
#   swaps a placeholder for the native binary; if npm ever skips install
#   scripts, that is where it shows).
# No API key is used or needed; nothing here talks to a model.
set -euo pipefail
cd "$(dirname "$0")"

fail() {
  echo "agent-clis install: $*" >&2
  exit 1
}

command -v node >/dev/null 2>&1 || fail "node is not installed (Node >= 20 needed)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || fail "Node >= 20 needed, found $(node --version)"

stamp=node_modules/.modix-install-stamp
want=$(sha256sum package-lock.json | cut -d' ' -f1)
bins=(claude codex gemini)

# Sets $versions to "claude …; codex …; gemini …", or fails if a CLI does not answer.
versions=
check_bins() {
  local b v
  versions=
  for b in "${bins[@]}"; do
    v=$(timeout 60 "node_modules/.bin/$b" --version </dev/null 2>/dev/null) || return 1
    versions="${versions:+$versions; }$b $v"
  done
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && check_bins; then
  echo "agent-clis: already installed ($versions)"
  exit 0
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
if ! timeout "${AGENT_CLIS_INSTALL_TIMEOUT:-600}" \
  npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
  cat "$log" >&2
  fail "npm ci failed or timed out after ${AGENT_CLIS_INSTALL_TIMEOUT:-600}s (is the npm registry reachable?)"
fi
check_bins || fail "installed, but a CLI does not answer --version (claude, codex, gemini in $(pwd)/node_modules/.bin)"
echo "$want" >"$stamp"
echo "agent-clis: installed in $(($(date +%s) - start))s, $(du -sh node_modules | cut -f1) ($versions)"
