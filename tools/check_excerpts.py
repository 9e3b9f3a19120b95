#!/usr/bin/python3
"""tools/check_excerpts.py — keeps the source excerpts of a chapter identical to the source.

    /usr/bin/python3 tools/check_excerpts.py [REPO_ROOT] [DOC]   (ctest: source_walk_excerpts_match)

DOC (default docs/source-walk.md) quotes library code. Each ```cpp block is preceded by a marker
naming the file it is copied from:

    <!-- excerpt: dist/ddp.cpp -->
    ```cpp
    void DistributedDataParallel::mark_ready(size_t i) {
    ```

The check fails when a block has no marker, the file does not exist, or the block's lines (with
the common indentation of the block and of the file's lines removed the same way) are not a
contiguous run of the file's lines. Exit status 0 when every excerpt matches, 1 otherwise (each
problem printed with its line in DOC).
"""
import pathlib
import re
import sys

from check_tutorial import contains  # the same indentation rule as the tutorial check

MARKER = re.compile(r"<!--\s*excerpt:\s*(\S+)\s*-->")


def main():
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    doc = root / (sys.argv[2] if len(sys.argv) > 2 else "docs/source-walk.md")
    lines = doc.read_text().splitlines()
    problems, checked, i = [], 0, 0
    while i < len(lines):
        if not lines[i].strip().startswith("```cpp"):
            i += 1
            continue
        start, j = i, i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        block = lines[start + 1:j]
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = MARKER.search(lines[k]) if k >= 0 else None
        where = f"{doc.name}:{start + 1}"
        if not m:
            problems.append(f"{where}: a cpp block without an '<!-- excerpt: FILE -->' marker above it")
        else:
            source = root / m.group(1)
            if not source.is_file():
                problems.append(f"{where}: {m.group(1)} does not exist")
            elif not contains(source.read_text().splitlines(), block):
                problems.append(f"{where}: the block is not a contiguous run of lines of {m.group(1)} "
                                f"(the source changed: update the excerpt); first line: {block[0].strip() if block else ''!r}")
            checked += 1
        i = j + 1
    for p in problems:
        print(p)
    print(f"check_excerpts: {checked} excerpts checked, {len(problems)} problems")
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
