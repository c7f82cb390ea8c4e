#!/usr/bin/env python3
"""Replaces what lies between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in a file.

    scripts/splice.py NAME FILE TEXT_FILE

Used by scripts/update-results.sh (`bench`) and scripts/service-bench.sh (`service`), so
that the tables in the README and docs/performance.md are written from a run, never
typed. Fails, changing nothing, unless the file holds exactly one pair of markers.
"""
import re
import sys

name, path, text_path = sys.argv[1:4]
text = open(text_path).read()
if not text.endswith("\n"):
    text += "\n"
s = open(path).read()
new, n = re.subn(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)",
                 lambda m: m.group(1) + text + m.group(2), s, flags=re.S)
if n != 1:
    sys.exit(f"{path}: expected one {name}:begin/{name}:end pair, found {n}")
open(path, "w").write(new)
