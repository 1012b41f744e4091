#!/usr/bin/env bash
# Installs the npm packages the tests compare against (tests/npm-deps/package.json)
# into DEST (default: tests/npm of the build tree), once: a stamp holding the
# package list's checksum skips the install when nothing changed.
# Usage: setup.sh SRCDIR DEST
set -euo pipefail
src="$1"
dest="$2"
mkdir -p "$dest"
sum=$(sha256sum "$src/tests/npm-deps/package.json" | cut -d' ' -f1)
if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$sum" ] && [ -d "$dest/node_modules" ]; then
  exit 0
fi
cp "$src/tests/npm-deps/package.json" "$dest/package.json"
chmod u+w "$dest/package.json"
# --ignore-scripts: the packages ship their native libraries; nothing may be
# downloaded by install hooks.
(cd "$dest" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
echo "$sum" > "$dest/.stamp"
