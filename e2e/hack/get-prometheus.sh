#!/usr/bin/env bash
# Puts Debian's prometheus and promtool under e2e/.cache/prometheus, without
# installing anything system-wide: the package is downloaded with apt-get and
# unpacked with dpkg-deb. See e2e/README.md for why this and not a Go build.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest="$here/.cache/prometheus"
bin="$dest/usr/bin/prometheus"
if [ -x "$bin" ] && [ -x "$dest/usr/bin/promtool" ]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download prometheus >/dev/null 2>&1; then
  # A fresh machine may have no package lists yet.
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null; else sudo apt-get update -qq >/dev/null; fi
  apt-get download prometheus >/dev/null
fi
rm -rf "$dest"
mkdir -p "$dest"
dpkg-deb -x prometheus_*.deb "$dest"
"$bin" --version | head -1
