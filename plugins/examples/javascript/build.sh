#!/usr/bin/env bash
# Builds the RenderTable example into a WebAssembly component.
# Usage: build.sh OUT.wasm
# Needs the pinned toolchain in node_modules (npm ci). componentize-js
# generates the bindings for the WIT contract during the build; nothing
# generated is kept here.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wit="$here/../../../wit/since_v0.1.0"
out="$(realpath -m "$1")"
cli="$here/node_modules/.bin/componentize-js"

if [[ ! -x "$cli" ]]; then
    echo "error: componentize-js not found in $here/node_modules; install it with: (cd $here && npm ci)" >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
# Every optional engine feature is disabled: left on, `http` and
# `fetch-event` make the component import wasi:http (which the host does not
# offer), and stdio/random/clocks would be WASI imports the tool never needs.
# The component then imports only maestro:tool/host.
"$cli" "$here/render_table.js" --wit "$wit" --world-name plugin \
    --disable stdio random clocks http fetch-event --out "$out"
