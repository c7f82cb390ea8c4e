#!/usr/bin/env python3
"""Labelled invariants and protocol steps (`AD1`, `LT3`, `P1-P7`, ...) are defined once
and cited only when defined. Exit status 1 and a list when a check fails.

A label is one to three capital letters and a number. It is *defined* where a comment
line of a file's header essay (the first comment block after its includes or
imports, and in a Swift file each comment block that opens a `// MARK: -` section)
or of a doc comment begins with it and goes on to say what it is
(`// AD1. A slot is taken ...`, ` *   T1  Every usable CPU ...`, `/// OF1. ...`). A
header may also define labels in prose (`... is never lost (K1).`): such a mention
counts as the definition when no file defines the label in the first way, and is a
citation otherwise; so is a mention after a file name (`(park.c, S1)`). Everywhere
else in the engine, the façade, the models and docs/, a label is *cited*, alone or in
a range (`P1-P7`, `T1–T3`, which cite every label between).

1. Every cited label has a definition, and one cited after a file name is that file's.
2. No label is defined twice.
3. No "rule N" reference: a rule is cited by its label.
4. Every label docs/architecture.md names is defined in the code, and a range its
   tables name (`R1–R7`) reaches the last label of that family: the map is what a
   newcomer reads first.
5. The README's table of models lists every model in Tests/Models with the number of
   mutants it names, and the Reliability table counts them.

Words that look like labels and are not: L3 (the cache), C11 (the language standard).
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
NOT_LABELS = {"L3", "C11"}
LABEL = r"[A-Z]{1,3}[0-9]{1,2}"
label_range = re.compile(rf"\b({LABEL})\s*(?:-|–|\.\.)\s*({LABEL})\b")
label = re.compile(rf"\b({LABEL})\b")
rule_n = re.compile(r"\brules? [0-9]\b", re.IGNORECASE)

def sources():
    for top, patterns in (("Sources", ("*.c", "*.h", "*.swift")), ("Tests/Models", ("*.pml",)),
                          ("docs", ("*.md",))):
        for pattern in patterns:
            yield from sorted((root / top).rglob(pattern))


def header(lines, suffix):
    """The line numbers (from 0) of the file's header essay."""
    i = 0
    skip = re.compile(r"^\s*$|^\s*(import |#include|#ifndef|#define|@_|#if|#endif)")
    while i < len(lines) and skip.match(lines[i]):
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("/*"):
        j = i
        while j < len(lines) and "*/" not in lines[j]:
            j += 1
        return range(i, j + 1)
    def block(i):
        j = i
        while j < len(lines) and lines[j].lstrip().startswith("//") and not lines[j].lstrip().startswith("///"):
            j += 1
        return range(i, j)
    essay = list(block(i))
    for k in range(i + len(essay), len(lines)):
        if lines[k].startswith("// MARK: -"):
            essay += block(k)
    return essay


def split(l):
    m = re.match(r"([A-Z]+)([0-9]+)$", l)
    return m.group(1), int(m.group(2))


elsewhere = re.compile(r"([\w+]+\.(?:c|h|swift|pml|md)(?=[,:]?\s*$)|\bsee(?=\s*$))")
listed = re.compile(rf"^\s*(?://+|/?\*+)\s*({LABEL})(?:\.\s|\s{{2,}})\S")
strong, weak, cited, failures = {}, {}, {}, []
named_files = []  # (label, file name, where): "(park.c, S1)"
for path in sources():
    rel = path.relative_to(root).as_posix()
    lines = path.read_text().splitlines()
    # The models follow the code and cite its labels; they define none.
    head = set(header(lines, path.suffix)) if path.suffix not in (".md", ".pml") else set()
    for number, line in enumerate(lines, 1):
        where = f"{rel}:{number}"
        if rule_n.search(line):
            failures.append(f"{where}: cites a rule by number ('{rule_n.search(line).group(0)}'); cite its label")
        in_head = number - 1 in head
        m = listed.match(line)
        if m and m.group(1) not in NOT_LABELS and (in_head or line.lstrip().startswith("///")):
            strong.setdefault(m.group(1), set()).add(rel)
        names, spans = [], []
        for r in label_range.finditer(line):
            (pa, na), (pb, nb) = split(r.group(1)), split(r.group(2))
            if pa == pb and na < nb:
                names += [(f"{pa}{n}", r.start()) for n in range(na, nb + 1)]
                spans.append((r.start(), r.end()))
        names += [(x.group(1), x.start()) for x in label.finditer(line)
                  if not any(a <= x.start() < b for a, b in spans)]
        for l, at in names:
            if l in NOT_LABELS:
                continue
            qualified = elsewhere.search(line[:at])
            if in_head and not qualified:
                weak.setdefault(l, set()).add(rel)
            cited.setdefault(l, []).append(where)
            if qualified and qualified.group(1) != "see":
                named_files.append((l, qualified.group(1), where))

defined = {}
for l in set(strong) | set(weak):
    defined[l] = strong.get(l) or weak[l]
    if len(defined[l]) > 1:
        how = "defined" if l in strong else "named in the headers of"
        failures.append(f"{l} is {how} {len(defined[l])} files: " + ", ".join(sorted(defined[l])))
for l, places in sorted(cited.items()):
    if l not in defined:
        docs = [p for p in places if p.startswith("docs/")]
        what = "named in docs, defined nowhere:" if docs else "cited, defined nowhere:"
        failures.append(f"{l}: {what} {', '.join(places[:4])}{' …' if len(places) > 4 else ''}")
# The map names each family whole: a range in docs/architecture.md reaches the last
# label of its family that the defining file has.
arch = root / "docs/architecture.md"
for number, line in enumerate(arch.read_text().splitlines(), 1):
    if not line.startswith("|"):
        continue  # the map's tables list each file's labels; prose may name a part
    named = set(label.findall(line))
    for r in label_range.finditer(line):
        (pa, na), (pb, nb) = split(r.group(1)), split(r.group(2))
        if pa == pb:
            named |= {f"{pa}{n}" for n in range(na, nb + 1)}
    for r in label_range.finditer(line):
        pa, files = split(r.group(1))[0], defined.get(r.group(1))
        if not files:
            continue
        missing = sorted((l for l, fs in defined.items() if fs == files and split(l)[0] == pa and l not in named),
                         key=lambda l: split(l)[1])
        if missing:
            failures.append(f"docs/architecture.md:{number}: names {r.group(0)}, but {', '.join(sorted(files))} "
                            f"also defines {', '.join(missing)}")
for l, name, where in named_files:
    if l in defined and not any(f.endswith("/" + name) for f in defined[l]):
        failures.append(f"{where}: cites {name}'s {l}, which {', '.join(sorted(defined[l]))} defines")
# The README's table of models lists every model, with as many mutants as the model
# names (scripts/model-check.sh runs each `-DMUTANT...` in its file), and its summary row
# counts them all.
readme = (root / "README.md").read_text()
table = dict(re.findall(r"^\| `([a-z_]+\.pml)` \|.*\| (\d+) \|$", readme, re.M))
models = {m.name: len(set(re.findall(r"-DMUTANT[A-Z_]*", m.read_text())))
          for m in sorted((root / "Tests/Models").glob("*.pml"))}
for name, mutants in models.items():
    if name not in table:
        failures.append(f"README.md: the table of models does not list {name}")
    elif int(table[name]) != mutants:
        failures.append(f"README.md: the table of models gives {name} {table[name]} mutants; it names {mutants}")
for name in table:
    if name not in models:
        failures.append(f"README.md: the table of models lists {name}, which Tests/Models does not have")
summary = re.search(r"(\d+) models, [^|]*?; (\d+) mutants, each caught", readme)
if not summary or (int(summary.group(1)), int(summary.group(2))) != (len(models), sum(models.values())):
    failures.append(f"README.md: the Reliability table should count {len(models)} models and "
                    f"{sum(models.values())} mutants")
if failures:
    print("\n".join(sorted(set(failures), key=failures.index)))
    sys.exit(1)
print(f"labels ok: {len(defined)} labels, each defined in one file, every citation defined")
