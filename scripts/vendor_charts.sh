#!/usr/bin/env bash
# Re-vendors the browser's chart library from the npm registry: Observable Plot and the d3 it
# runs on, pinned, checked by the tarballs' sha256, copied unmodified into marin_lab/browser/static/
# with their licences. The browser serves them from the package; a page never loads a CDN.
set -euo pipefail
PLOT_VERSION=0.6.17
PLOT_SHA256=4dcc9f7afd10caee8b2283c0075a5765610cfbbf6d7d93cdb153b3b5d3501afc
D3_VERSION=7.9.2
D3_SHA256=f0c1d2c2479907a6e3265370d0fd715f7aef0f561cdd2b415df385ba7df9d1aa
static="$(cd "$(dirname "$0")/.." && pwd)/marin_lab/browser/static"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "@observablehq/plot@${PLOT_VERSION}" "d3@${D3_VERSION}" >/dev/null
echo "${PLOT_SHA256}  observablehq-plot-${PLOT_VERSION}.tgz" | sha256sum -c --quiet
echo "${D3_SHA256}  d3-${D3_VERSION}.tgz" | sha256sum -c --quiet
mkdir plot d3
tar xzf "observablehq-plot-${PLOT_VERSION}.tgz" -C plot
tar xzf "d3-${D3_VERSION}.tgz" -C d3
cp plot/package/dist/plot.umd.min.js "$static/plot.umd.min.js"
cp d3/package/dist/d3.min.js "$static/d3.min.js"
{ echo "Observable Plot ${PLOT_VERSION} (npm: @observablehq/plot, https://github.com/observablehq/plot),"
  echo "vendored unmodified as plot.umd.min.js; tarball sha256 ${PLOT_SHA256}."
  echo; cat plot/package/LICENSE; } > "$static/plot-LICENSE.txt"
{ echo "d3 ${D3_VERSION} (npm: d3, https://github.com/d3/d3), vendored unmodified as d3.min.js;"
  echo "tarball sha256 ${D3_SHA256}."
  echo; cat d3/package/LICENSE; } > "$static/d3-LICENSE.txt"
echo "vendored Plot ${PLOT_VERSION} and d3 ${D3_VERSION} into ${static}"
