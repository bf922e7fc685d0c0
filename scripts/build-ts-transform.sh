#!/usr/bin/env bash
# Builds yao_agent/hooks/vendor/sucrase.js, the TypeScript transform hooks' `.ts` files go through, from
# the npm registry with the exact versions of scripts/ts-transform/package-lock.json: the same inputs
# give the same file (it prints the file's sha256, which tests/hooks/test_typescript.py records).
#
#   scripts/build-ts-transform.sh        (needs Node.js and npm; nothing else of the project)
#
# The bundle defines one global function, `__yao_strip(source) -> string`: the source with its types
# removed, every line where it was (sucrase's `typescript` transform, nothing else: no module or JSX
# transform, no modern syntax lowered — V8 runs it as written).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/yao_agent/hooks/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/scripts/ts-transform/package.json" "$here/scripts/ts-transform/package-lock.json" "$work/"
cd "$work"
npm ci --no-audit --no-fund --silent >/dev/null
SUCRASE=$(node -p 'require("./node_modules/sucrase/package.json").version')
cat > entry.js <<'JS'
import { transform } from "sucrase";
globalThis.__yao_strip = (source) =>
  transform(source, { transforms: ["typescript"], disableESTransforms: true, keepUnusedImports: false }).code;
JS
./node_modules/.bin/esbuild entry.js --bundle --format=iife --platform=neutral --main-fields=module,main --target=es2020 --minify \
  --legal-comments=none --log-level=warning --outfile=sucrase.js
mkdir -p "$out"
{ printf '// sucrase %s (MIT: sucrase.LICENSE), bundled by scripts/build-ts-transform.sh\n' "$SUCRASE"; cat sucrase.js; } \
  > "$out/sucrase.js"
cp node_modules/sucrase/LICENSE "$out/sucrase.LICENSE"
sha256sum "$out/sucrase.js" | cut -d' ' -f1
