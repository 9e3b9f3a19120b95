#!/usr/bin/python3
"""tools/check_tutorial.py — keeps docs/tutorial.md's code identical to code that CMake builds.

    /usr/bin/python3 tools/check_tutorial.py [REPO_ROOT]      (ctest: tutorial_snippets_match_examples)

Every C++ block of the tutorial is preceded by a marker naming where it comes from:

    <!-- snippet: examples/train.cpp init -->
    ```cpp
    dist::init();
    ```

and the source marks the region with comment lines `// [tutorial:init]` ... `// [/tutorial:init]`.
The check fails when a ```cpp block has no marker, a marker names a missing file or region, the
block's lines (indentation removed) are not a contiguous run of the region's lines (same
indentation rule), or the file is not in examples/ or not named (by its stem, e.g. `train` or
`05_train_data_parallel`) in examples/CMakeLists.txt, which builds it.
Exit status 0 when every snippet matches, 1 otherwise (each problem printed with its line).
"""
import pathlib
import re
import sys

MARKER = re.compile(r"<!--\s*snippet:\s*(\S+)\s+(\S+)\s*-->")


def dedent(lines):
    lines = [l.rstrip() for l in lines]
    indents = [len(l) - len(l.lstrip()) for l in lines if l.strip()]
    cut = min(indents, default=0)
    return [l[cut:] for l in lines]


def region(path, name):
    """The lines between `// [tutorial:name]` and `// [/tutorial:name]`, or None."""
    lines = path.read_text().splitlines()
    begin = [i for i, l in enumerate(lines) if l.strip() == f"// [tutorial:{name}]"]
    end = [i for i, l in enumerate(lines) if l.strip() == f"// [/tutorial:{name}]"]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        return None
    return lines[begin[0] + 1:end[0]]


def contains(region_lines, snippet):
    snippet = dedent(snippet)
    n = len(snippet)
    return any(dedent(region_lines[i:i + n]) == snippet for i in range(len(region_lines) - n + 1))


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    tutorial = root / "docs" / "tutorial.md"
    cmake = (root / "examples" / "CMakeLists.txt").read_text()
    lines = tutorial.read_text().splitlines()
    problems, checked, i = [], 0, 0
    while i < len(lines):
        if lines[i].strip().startswith("```cpp"):
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            block = lines[i + 1:j]
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            m = MARKER.search(lines[k]) if k >= 0 else None
            where = f"{tutorial}:{start + 1}"
            if not m:
                problems.append(f"{where}: a cpp block without a '<!-- snippet: FILE REGION -->' marker above it")
            else:
                rel, name = m.groups()
                src = root / rel
                if not src.is_file():
                    problems.append(f"{where}: {rel} does not exist")
                elif not rel.startswith("examples/") or pathlib.PurePath(rel).stem not in cmake:
                    problems.append(f"{where}: {rel} is not built by examples/CMakeLists.txt")
                else:
                    reg = region(src, name)
                    if reg is None:
                        problems.append(f"{where}: {rel} has no single region // [tutorial:{name}] ... // [/tutorial:{name}]")
                    elif not contains(reg, block):
                        problems.append(f"{where}: the block differs from region '{name}' of {rel}")
                    else:
                        checked += 1
            i = j + 1
        else:
            i += 1
    for p in problems:
        print(p)
    print(f"check_tutorial: {checked} snippet(s) match their source, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
