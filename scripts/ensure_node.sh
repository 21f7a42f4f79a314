#!/usr/bin/env bash
# Node.js for tests/test_clients.py: the client module (GET /chat/static/loopengine-client.js) is
# tested under node's own test runner (node --test; no npm package) against a real loopengine dev.
# Debian's nodejs (/usr/bin/node) is all it needs: Node 18 or later (fetch, web streams, node:test).
#
# When it is missing, this installs it with apt-get only when the machine allows it AND you asked
# for it: running as root, apt-get present, and LOOPENGINE_INSTALL_NODE=1 (.ci/run sets it).
# It says what it installs and why before it starts. Otherwise it prints one line saying why the
# client module's test will be skipped (pytest then shows the same reason in its skip summary).
#
#   scripts/ensure_node.sh             never fails: install if allowed, else explain the skip
#   scripts/ensure_node.sh --required  exit 1 unless node is there afterwards (CI)
set -uo pipefail

REQUIRED=0
[ "${1:-}" = "--required" ] && REQUIRED=1
PACKAGES="nodejs"

have_node() { command -v node >/dev/null 2>&1 || command -v nodejs >/dev/null 2>&1; }

skip() {
  if [ "$REQUIRED" -eq 1 ]; then
    echo "ensure_node: $1; node is --required here: failing" >&2
    exit 1
  fi
  echo "ensure_node: $1; the client module's test under node (tests/test_clients.py) will be skipped"
  exit 0
}

if have_node; then
  exit 0
fi

why="node is not on PATH"
if [ "${LOOPENGINE_INSTALL_NODE:-}" != "1" ]; then
  skip "$why (set LOOPENGINE_INSTALL_NODE=1 to let this script apt-get install $PACKAGES as root)"
fi
if [ "$(id -u)" -ne 0 ]; then
  skip "$why and installing it needs root (run: sudo apt-get install $PACKAGES)"
fi
if ! command -v apt-get >/dev/null 2>&1; then
  skip "$why and there is no apt-get here to install $PACKAGES with"
fi

echo "ensure_node: LOOPENGINE_INSTALL_NODE=1: installing Debian's $PACKAGES with apt-get"
echo "ensure_node: (to test the chat's client module under node; about 30 MB, seconds)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -q; then
  skip "apt-get update failed"
fi
if ! apt-get install -y -q --no-install-recommends $PACKAGES; then
  skip "apt-get install $PACKAGES failed"
fi
if ! have_node; then
  skip "apt-get installed $PACKAGES but $why"
fi
echo "ensure_node: installed node $(node --version 2>/dev/null || nodejs --version 2>/dev/null)"
exit 0
