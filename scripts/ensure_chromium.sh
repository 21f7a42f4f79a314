#!/usr/bin/env bash
# The headless browser for tests/test_magic_browser.py: Debian's chromium and chromium-driver
# (/usr/bin/chromium, /usr/bin/chromedriver).
#
# When they are missing, this installs them with apt-get only when the machine allows it AND you
# asked for it: running as root, apt-get present, and LOOPENGINE_INSTALL_BROWSER=1 (.ci/run sets it).
# It says what it installs and why before it starts. Otherwise it prints one line saying why the
# browser test will be skipped (pytest then shows the same reason in its skip summary).
#
#   scripts/ensure_chromium.sh             never fails: install if allowed, else explain the skip
#   scripts/ensure_chromium.sh --required  exit 1 unless the browser is there afterwards (CI)
set -uo pipefail

REQUIRED=0
[ "${1:-}" = "--required" ] && REQUIRED=1
PACKAGES="chromium chromium-driver"

have_browser() { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }

skip() {
  if [ "$REQUIRED" -eq 1 ]; then
    echo "ensure_chromium: $1; the browser is --required here: failing" >&2
    exit 1
  fi
  echo "ensure_chromium: $1; the browser test (tests/test_magic_browser.py) will be skipped"
  exit 0
}

if have_browser; then
  exit 0
fi

why="/usr/bin/chromium or /usr/bin/chromedriver is missing"
if [ "${LOOPENGINE_INSTALL_BROWSER:-}" != "1" ]; then
  skip "$why (set LOOPENGINE_INSTALL_BROWSER=1 to let this script apt-get install $PACKAGES as root)"
fi
if [ "$(id -u)" -ne 0 ]; then
  skip "$why and installing it needs root (run: sudo apt-get install $PACKAGES)"
fi
if ! command -v apt-get >/dev/null 2>&1; then
  skip "$why and there is no apt-get here to install $PACKAGES with"
fi

echo "ensure_chromium: LOOPENGINE_INSTALL_BROWSER=1: installing Debian's $PACKAGES with apt-get"
echo "ensure_chromium: (for the headless browser test of magic links; pulls about 130 system packages,"
echo "ensure_chromium:  roughly 400 MB, typically 1 to 3 minutes)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -q; then
  skip "apt-get update failed"
fi
if ! apt-get install -y -q $PACKAGES; then
  skip "apt-get install $PACKAGES failed"
fi
if ! have_browser; then
  skip "apt-get installed $PACKAGES but $why"
fi
echo "ensure_chromium: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
exit 0
