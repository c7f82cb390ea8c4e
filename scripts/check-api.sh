#!/usr/bin/env bash
# The public API, recorded: what the Spindle and SpindleServiceLifecycle modules declare
# public (kind, name, types, and the flags that change what a caller may do), in
# api/<module>.txt, from `swift-api-digester -dump-sdk` of the debug build. CI fails when
# the build's API differs from the record, so that a change to the public surface is
# made on purpose: run `scripts/check-api.sh --update`, commit the record, and say so in
# CHANGELOG.md. Needs the debug build with the ServiceLifecycle trait (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
update=false
[ "${1:-}" = "--update" ] && update=true
[ -d .build/debug/Modules ] || swift build --traits ServiceLifecycle >&2
modulemap=$(find -L .build/debug -maxdepth 2 -name module.modulemap -path '*CSpindle.build*' -print -quit)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for module in Spindle SpindleServiceLifecycle; do
  swift-api-digester -dump-sdk -module "$module" -I .build/debug/Modules -I Sources/CSpindle/include \
    -Xcc -fmodule-map-file="$modulemap" -o "$work/$module.json"
  python3 - "$work/$module.json" > "$work/$module.txt" <<'PY'
import json, re, sys
root = json.load(open(sys.argv[1]))["ABIRoot"]
TYPES = ("TypeNominal", "TypeNameAlias", "TypeFunc")
FLAGS = ("static", "throwing", "isAsync", "isOpen", "isFinal", "mutating", "isLet", "hasSetter",
         "isInternal", "isEnumExhaustive", "objc_name")
lines = set()
def walk(node, owner):
    kind = node.get("declKind")
    name = node.get("printedName", "")
    if node.get("kind") == "Import":
        return
    if kind and node.get("kind") != "Root":
        types = [c.get("printedName", "") for c in node.get("children") or [] if c.get("kind") in TYPES]
        flags = [f for f in FLAGS if node.get(f)]
        # The dump has no flag for async; Swift's mangling marks an async function type
        # "Ya" (then "K" when it throws), and a closure type goes on to "c" (after "Yb" when
        # it is @Sendable): an async
        # marker not followed by "c" is the declaration's own.
        if re.search(r"Ya(?:K)?(?!c|Yb)", node.get("mangledName") or ""):
            flags.append("async")
        attrs = node.get("declAttributes") or []
        text = f"{kind} {owner}{name}"
        if types: text += " : " + ", ".join(types)
        if flags: text += " [" + ", ".join(flags) + "]"
        if attrs: text += " @" + " @".join(sorted(attrs))
        for conf in node.get("conformances") or []:
            lines.add(f"Conformance {owner}{name}: {conf.get('printedName', '')}")
        lines.add(text)
    nested = owner + name + "." if kind in ("Class", "Struct", "Enum", "Protocol", "Extension") else owner
    for c in node.get("children") or []:
        if c.get("kind") not in TYPES:
            walk(c, nested)
walk(root, "")
print("\n".join(sorted(lines)))
PY
  if $update; then
    cp "$work/$module.txt" "api/$module.txt"
    echo "check-api: recorded api/$module.txt ($(wc -l < "api/$module.txt") declarations)"
  elif ! diff -u "api/$module.txt" "$work/$module.txt" > "$work/$module.diff"; then
    cat "$work/$module.diff"
    echo "check-api: $module's public API differs from api/$module.txt; if that is meant, run scripts/check-api.sh --update and note it in CHANGELOG.md" >&2
    status=1
  else
    echo "check-api: $module's public API matches api/$module.txt"
  fi
done
exit $status
