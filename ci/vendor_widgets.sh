#!/usr/bin/env bash
# Vendor the book's read-time JavaScript from the npm registry into _vendor/ (git-ignored),
# so that the rendered HTML never reaches a CDN:
#   _vendor/require.js              RequireJS 2.3 (the widget embedder is an AMD bundle)
#   _vendor/widgets/embed-amd.js    @jupyter-widgets/html-manager (+ its icon fonts)
#   _vendor/widgets/embed-setup.js  ours (ci/vendor/embed-setup.js), loaded just before it
#   _vendor/mathjax/tex-chtml.js    MathJax 3 es5 tree (the fonts and extensions it loads)
#   _vendor/vega/vega@V, vega-lite@V, vega-embed@V
#                                   the interactive figures' scripts (dspark_lite/harness/interactive.py),
#                                   named as Altair's loader asks for them: <base_url>/<name>@<version>
# Versions are pinned exactly in ci/vendor/package.json + package-lock.json.
# Idempotent: a no-op when _vendor/ already matches the lock file.
set -eo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PKG="$ROOT/ci/vendor"
OUT="$ROOT/_vendor"
STAMP="$OUT/.lock.sha256"

lock_hash() { sha256sum "$PKG/package.json" "$PKG/package-lock.json" "$PKG/embed-setup.js" 2>/dev/null | sha256sum | cut -d' ' -f1; }

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(lock_hash)" \
      && -f "$OUT/require.js" && -f "$OUT/widgets/embed-amd.js" && -f "$OUT/widgets/embed-setup.js" && -f "$OUT/mathjax/tex-chtml.js" \
      && -d "$OUT/vega" ]]; then
    echo "vendor: _vendor/ is up to date"
    exit 0
fi

command -v npm >/dev/null || { echo "vendor: npm not found: apt-get install npm (or nodejs)" >&2; exit 1; }

cd "$PKG"
if [[ -f package-lock.json ]]; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
else
    npm install --ignore-scripts --no-audit --no-fund --loglevel=error
fi

NM="$PKG/node_modules"
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp/widgets"
cp "$NM/requirejs/require.js" "$OUT.tmp/require.js"
# embed-amd.js finds its webpack assets (Font Awesome fonts) next to itself.
find "$NM/@jupyter-widgets/html-manager/dist" -maxdepth 1 -type f \
    \( -name 'embed-amd.js' -o -name '*.woff2' -o -name '*.woff' -o -name '*.ttf' -o -name '*.eot' -o -name '*.svg' \) \
    -exec cp {} "$OUT.tmp/widgets/" \;
cp "$PKG/embed-setup.js" "$OUT.tmp/widgets/"   # ours: asset path + MathJax 2 call shim
# tex-chtml.js loads its fonts (output/chtml/fonts/woff-v2) and extensions relative to itself.
# The other combined builds are dropped (latest.js would even fetch from a CDN).
cp -r "$NM/mathjax/es5" "$OUT.tmp/mathjax"
find "$OUT.tmp/mathjax" -maxdepth 1 -type f -name '*.js' \
    ! -name tex-chtml.js ! -name core.js ! -name loader.js ! -name startup.js -delete

# Vega-Lite's three scripts, as <name>@<exact version> (no extension: Altair's loader appends
# "?noext", which a static server ignores). ci/kernel_setup.py asks Altair for these versions.
mkdir -p "$OUT.tmp/vega"
for lib in vega vega-lite vega-embed; do
    version="$(node -p "require('$NM/$lib/package.json').version")"
    cp "$NM/$lib/build/$lib.min.js" "$OUT.tmp/vega/$lib@$version"
done

lock_hash > "$OUT.tmp/.lock.sha256"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "vendor: wrote $(find "$OUT" -type f | wc -l) files ($(du -sh "$OUT" | cut -f1)) to _vendor/"
