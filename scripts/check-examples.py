#!/usr/bin/env python3
"""Every Swift example in the README and the DocC articles is code that CI compiles.

An example (a ```swift block) is one of two kinds:

1. A manifest fragment: its first line starts with `.package(` or is `// Package.swift`.
   It is placed in a manifest and evaluated with `swift package dump-package`
   (the placeholder `<Spindle's repository URL>` becomes a URL).
2. Code. Its lines, as written, must appear as consecutive lines (indentation aside) of
   a compiled example: `Snippets/*.swift`, which `swift build` compiles as the package's
   snippets, or `Benchmarks/Service/Examples/*/`, targets of the service benchmark's
   package for the examples that need a server framework. What an example leaves to the
   reader (a `Thumbnail` type, a `router`) is declared around it there.

A compiled example that holds no document's example is reported too: it was left behind
when a document changed. Exit status 1 and a list when anything fails.

`--list` prints each example with the file that compiles it.
"""
import pathlib
import subprocess
import sys
import tempfile
import textwrap

root = pathlib.Path(__file__).resolve().parent.parent
documents = [root / "README.md"] + sorted((root / "Sources/Spindle/Spindle.docc").glob("*.md")) \
    + sorted((root / "docs").glob("*.md"))
compiled = sorted((root / "Snippets").glob("*.swift")) \
    + sorted((root / "Benchmarks/Service/Examples").glob("*/*.swift"))


def examples(path):
    """(first line number, lines) of each ```swift block."""
    lines = path.read_text().splitlines()
    blocks, start = [], None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == "```swift":
            start = number
        elif start is not None and line.strip() == "```":
            blocks.append((start + 1, lines[start:number - 1]))
            start = None
    return blocks


def normalised(lines):
    """The lines without their common indentation and trailing blanks."""
    text = textwrap.dedent("\n".join(line.rstrip() for line in lines))
    return text.strip("\n").splitlines()


def find(block, sources):
    """The compiled file and line where `block` appears, or None."""
    want = normalised(block)
    for path, lines in sources.items():
        for i in range(len(lines) - len(want) + 1):
            if lines[i].strip() == want[0].strip() and normalised(lines[i:i + len(want)]) == want:
                return path, i + 1
    return None


def manifest_fragment(block):
    first = block[0].strip() if block else ""
    return first.startswith(".package(") or first == "// Package.swift"


def check_manifest(block):
    """An error message, or None when the fragment evaluates in a manifest."""
    text = "\n".join(block).replace("<Spindle's repository URL>", "https://example.com/spindle")
    body = text if "dependencies:" in text else f"dependencies: [\n{text}\n]"
    with tempfile.TemporaryDirectory() as work:
        pathlib.Path(work, "Package.swift").write_text(
            "// swift-tools-version:6.1\nimport PackageDescription\n"
            f'let package = Package(\nname: "App",\n{body}\n)\n')
        run = subprocess.run(["swift", "package", "dump-package"], cwd=work,
                             capture_output=True, text=True)
        return None if run.returncode == 0 else (run.stderr or run.stdout).strip()


sources = {path: path.read_text().splitlines() for path in compiled}
used, failures, listing = set(), [], []
for document in documents:
    for line, block in examples(document):
        where = f"{document.relative_to(root)}:{line}"
        if manifest_fragment(block):
            error = check_manifest(block)
            if error:
                failures.append(f"{where}: the manifest fragment does not evaluate:\n{error}")
            listing.append(f"{where}: manifest fragment (swift package dump-package)")
            continue
        found = find(block, sources)
        if found is None:
            failures.append(f"{where}: no compiled example holds this block; put it, as written, "
                            "in Snippets/ or Benchmarks/Service/Examples/ (see scripts/check-examples.py)")
        else:
            used.add(found[0])
            listing.append(f"{where}: {found[0].relative_to(root)}:{found[1]}")
# A snippet is one example; an example target is a folder, with what the example leaves
# to the reader in files beside it.
def unit(path):
    return path if path.parent.name == "Snippets" else path.parent
for each in sorted({unit(path) for path in compiled} - {unit(path) for path in used}):
    failures.append(f"{each.relative_to(root)}: holds no example of the README or the articles")
if "--list" in sys.argv:
    print("\n".join(listing))
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"examples ok: {len(listing)} examples, each compiled or evaluated")
