#!/usr/bin/env bash
# The Redis server for tests/test_notify_redis.py: Debian's redis-server (/usr/bin/redis-server).
# The tests start their own throwaway server from this binary (loopback, a free port, a temporary
# directory, no persistence); nothing here starts or enables a system service.
#
# When it is missing, this installs it with apt-get only when the machine allows it AND you asked
# for it: running as root, apt-get present, and LOOPENGINE_INSTALL_REDIS=1 (.ci/run sets it).
# It says what it installs and why before it starts. Otherwise it prints one line saying why the
# redis tests will be skipped (pytest then shows the same reason in its skip summary).
#
#   scripts/ensure_redis.sh             never fails: install if allowed, else explain the skip
#   scripts/ensure_redis.sh --required  exit 1 unless redis-server is there afterwards (CI)
set -uo pipefail

REQUIRED=0
[ "${1:-}" = "--required" ] && REQUIRED=1
PACKAGES="redis-server"

have_redis() { command -v redis-server >/dev/null 2>&1; }

skip() {
  if [ "$REQUIRED" -eq 1 ]; then
    echo "ensure_redis: $1; redis-server is --required here: failing" >&2
    exit 1
  fi
  echo "ensure_redis: $1; the redis channel tests (tests/test_notify_redis.py) will be skipped"
  exit 0
}

if have_redis; then
  exit 0
fi

why="redis-server is not on PATH"
if [ "${LOOPENGINE_INSTALL_REDIS:-}" != "1" ]; then
  skip "$why (set LOOPENGINE_INSTALL_REDIS=1 to let this script apt-get install $PACKAGES as root)"
fi
if [ "$(id -u)" -ne 0 ]; then
  skip "$why and installing it needs root (run: sudo apt-get install $PACKAGES)"
fi
if ! command -v apt-get >/dev/null 2>&1; then
  skip "$why and there is no apt-get here to install $PACKAGES with"
fi

echo "ensure_redis: LOOPENGINE_INSTALL_REDIS=1: installing Debian's $PACKAGES with apt-get"
echo "ensure_redis: (for the redis notifier channel's tests against a real server; a few MB, seconds)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -q; then
  skip "apt-get update failed"
fi
# --no-install-recommends: the binary is all the tests need. Debian's package may try to start
# its own service; policy-rc.d 101 stops that where there is no init system (and is removed after).
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$POLICY" && chmod +x "$POLICY" && ADDED_POLICY=1
fi
apt-get install -y -q --no-install-recommends $PACKAGES
status=$?
[ "$ADDED_POLICY" -eq 1 ] && rm -f "$POLICY"
if [ "$status" -ne 0 ]; then
  skip "apt-get install $PACKAGES failed"
fi
if ! have_redis; then
  skip "apt-get installed $PACKAGES but $why"
fi
echo "ensure_redis: installed $(redis-server --version 2>/dev/null || echo redis-server)"
exit 0
