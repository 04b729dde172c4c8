#!/usr/bin/env bash
# Refetches the web UI's third-party browser files (xterm.js, Swagger UI, uPlot for the
# utilisation charts) from the npm registry (through npm, at the pinned versions below) into
# src/troupe/manager/web/static/vendor/, which is committed: the manager serves them itself
# and needs no network at run time. Also axe-core, which only the
# browser tests inject (accessibility audit), into tests/browser/vendor/axe-core/ (committed
# too: the tests need no network either). Change a version, run this, check the UI
# (tests/browser) and commit the result. Needs node and npm.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$ROOT/src/troupe/manager/web/static/vendor"
TESTS_DEST="$ROOT/tests/browser/vendor"
XTERM=@xterm/xterm@6.0.0
FIT=@xterm/addon-fit@0.11.0
SWAGGER=swagger-ui-dist@5.35.0
AXE=axe-core@4.14.1
UPLOT=uplot@1.6.32

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
for pkg in "$XTERM" "$FIT" "$SWAGGER" "$UPLOT" "$AXE"; do
  npm pack --silent "$pkg" >/dev/null
done
for tgz in *.tgz; do
  mkdir "${tgz%.tgz}" && tar -xzf "$tgz" -C "${tgz%.tgz}" --strip-components=1
done

rm -rf "$DEST" && mkdir -p "$DEST/xterm" "$DEST/swagger-ui" "$DEST/uplot"
cp xterm-xterm-*/lib/xterm.js xterm-xterm-*/css/xterm.css xterm-xterm-*/LICENSE "$DEST/xterm/"
cp xterm-addon-fit-*/lib/addon-fit.js "$DEST/xterm/"
cp swagger-ui-dist-*/swagger-ui-bundle.js swagger-ui-dist-*/swagger-ui.css \
  swagger-ui-dist-*/favicon-32x32.png swagger-ui-dist-*/LICENSE "$DEST/swagger-ui/"
cp uplot-*/dist/uPlot.iife.min.js uplot-*/dist/uPlot.min.css uplot-*/LICENSE "$DEST/uplot/"
# source-map comments would make browsers' dev tools ask for files that are not shipped
sed -i '/^\/\/# sourceMappingURL=/d' "$DEST"/xterm/*.js "$DEST"/swagger-ui/*.js
sed -i 's#/\*\# sourceMappingURL=[^*]*\*/##' "$DEST"/swagger-ui/*.css
cat > "$DEST/VERSIONS" <<V
$XTERM
$FIT
$SWAGGER
$UPLOT
V

rm -rf "$TESTS_DEST" && mkdir -p "$TESTS_DEST/axe-core"
cp axe-core-*/axe.min.js axe-core-*/LICENSE "$TESTS_DEST/axe-core/"
echo "$AXE" > "$TESTS_DEST/VERSIONS"

for d in "$DEST" "$TESTS_DEST"; do
  echo "vendored into $d:"
  (cd "$d" && find . -type f | sort)
done
