#!/bin/sh
# `make screenshots`: starts the daemon on the tiny model and runs
# tests/webui/screenshots.js, which writes the screenshots into
# SCREENSHOT_DIR (default docs/screenshots/ of the source tree) and prints
# each page's weight. Not part of `make check`.
NAME=screenshots
. "$QD_SRCDIR/tests/serve/common.sh"
[ -x "${QD_CHROMIUM:-/usr/bin/chromium}" ] || fail "Chromium is missing (apt-get install chromium)"
serve_model
serve_start
"$NODE" "$QD_SRCDIR/tests/webui/screenshots.js" "$BASE" "${SCREENSHOT_DIR:-$QD_SRCDIR/docs/screenshots}" \
  "${SCREENSHOT_LOAD_SECONDS:-75}" || fail "the screenshots failed"
serve_stop
[ "$STATUS" = 0 ] || fail "exit status $STATUS"
rm -rf "$work"
