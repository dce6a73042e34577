#!/usr/bin/env bash
# Builds the Confirm example (confirm.wat) into a WebAssembly component.
# Usage: build.sh OUT.wasm
# Needs node and the jco in ../javascript/node_modules ((cd ../javascript &&
# npm ci)). The project's own build does the same three steps with the wat
# and wit-component crates (embed_component_metadata + ComponentEncoder).
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
js="$here/../javascript"
wit="$here/../../../wit/since_v0.1.0"
out="$(realpath -m "$1")"
jco="$js/node_modules/.bin/jco"
if [[ ! -x "$jco" ]]; then
    echo "error: jco not found in $js/node_modules; install it with: (cd $js && npm ci)" >&2
    exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"

# 1. WAT -> core module.
"$jco" parse "$here/confirm.wat" -o "$tmp/core.wasm"

# 2. Embed the WIT of world `plugin`. Not `jco embed --wit DIR`: jco 1.35 runs
# wasm-tools with no filesystem preopens, so it cannot read DIR ("No such file
# or directory"). jco's API takes the WIT as source text instead; world.wit
# (which declares the package) goes first.
(cd "$js" && node --input-type=module -e '
import { readFile, writeFile } from "node:fs/promises";
import { componentEmbed } from "@bytecodealliance/jco";
const [core, wit, out] = process.argv.slice(1);
const files = ["world.wit", "types.wit", "host.wit", "tool.wit"];
const witSource = (await Promise.all(files.map((f) => readFile(`${wit}/${f}`, "utf8")))).join("\n");
await writeFile(out, await componentEmbed({ binary: await readFile(core), witSource, world: "plugin" }));
' "$tmp/core.wasm" "$wit" "$tmp/embedded.wasm")

# 3. Core module + metadata -> component.
"$jco" new "$tmp/embedded.wasm" -o "$out"
