#!/usr/bin/env python3
"""Source checks the compiler does not make. Exit status 1 and a list when one fails.

1. No `withLock` on Synchronization's `Mutex`: use `locked` (Sources/Spindle/Runtime/Locking.swift).
   On Linux, Mutex is a priority-inheritance futex locked inside libswiftSynchronization,
   which is built without ThreadSanitizer. Contended, the lock is handed over in that
   library's slow path and the kernel, so TSan sees no acquire and reports a race on
   what the Mutex protects. That fails only when two threads collide, so a suite can pass
   many runs and then fail CI, as TaskExecutorTests did. `locked` adds TSan
   acquire/release annotations. A file that sees only the public API (a plain
   `import Spindle`) uses NSLock, a pthread mutex that TSan intercepts.

   The check is textual: it collects names declared as a Mutex in each file
   (`let x = Mutex(`, `let x: Mutex<`) and flags `x.withLock` in the same file.

2. No Swift file longer than 500 lines. One concern per file keeps each protocol in
   one place, and a file that outgrows that has more than one concern to split out.

3. The façade's layers look only down: Sources/Spindle/Runtime (locks, the FIFO, the
   line of waiting tasks, the layout-dependent techniques) names nothing of the layers
   built on it — no Operation, OperationQueue or ThreadPool.

4. Every site that makes or reads a reference or a pointer by hand in Sources/Spindle
   (`Unmanaged.passRetained`/`passUnretained`, `fromOpaque`, a pointer from or to a bit
   pattern) has a `safety:` comment, in the 10 lines above it, naming what keeps it
   sound. The compiler's strict memory safety checking (Package.swift) asks for `unsafe`
   at each of them; this asks for the reason.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
declared = re.compile(r"\b(?:let|var)\s+(\w+)\s*(?::\s*Mutex\b|=\s*Mutex\s*[(<])")
MAX_LINES = 500
failures = []
# The project's own files: not the packages a build checked out (.build*).
paths = sorted(p for top in ("Sources", "Tests", "Benchmarks") for p in (root / top).rglob("*.swift")
               if not any(part.startswith(".build") for part in p.relative_to(root).parts))
for path in paths:
    rel = path.relative_to(root)
    if rel.as_posix() == "Sources/Spindle/Runtime/Locking.swift":
        continue
    text = path.read_text()
    if len(text.splitlines()) > MAX_LINES:
        failures.append(f"{rel}: {len(text.splitlines())} lines, more than {MAX_LINES}: split out a concern")
    names = set(declared.findall(text))
    for number, line in enumerate(text.splitlines(), 1):
        for name in names:
            if re.search(rf"\b{name}\s*\.withLock\b", line):
                failures.append(f"{rel}:{number}: `{name}` is a Mutex: use `locked`, not `withLock` "
                                "(ThreadSanitizer cannot see a contended Mutex; see scripts/check-swift.py)")
upper = re.compile(r"\b(Operation|OperationQueue|BlockOperation|ThreadPool|QoSPools)\b")
for path in sorted((root / "Sources/Spindle/Runtime").glob("*.swift")):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if upper.search(line):
            failures.append(f"{path.relative_to(root)}:{number}: Runtime/ names `{upper.search(line).group(1)}`, "
                            "a layer above it (scripts/check-swift.py, 3)")
by_hand = re.compile(r"Unmanaged(?:<\w+>)?\.(?:passRetained|passUnretained|fromOpaque)|fromOpaque\("
                     r"|(?:UnsafeRawPointer|UnsafeMutableRawPointer|OpaquePointer)\(bitPattern:"
                     r"|UInt\(bitPattern:\s*(?:UnsafeRawPointer|\w+\.toOpaque|Unmanaged)")
for path in sorted((root / "Sources/Spindle").rglob("*.swift")):
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        code = line.split("//", 1)[0]
        if by_hand.search(code) and not any("safety:" in l for l in lines[max(0, number - 11):number]):
            failures.append(f"{path.relative_to(root)}:{number}: a reference or pointer made by hand with no "
                            "`safety:` comment in the 10 lines above it (scripts/check-swift.py, 4)")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("swift source checks ok")
