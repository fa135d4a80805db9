#!/usr/bin/env python3
"""The public/detail boundary of include/moecomp (docs/index.md, "How a module is laid out"): a module's
detail/ headers are its own. They may be included by that module's headers, host (moecomp/<m>/...) or device
(moecomp/cuda/<m>/...), and by nothing else; what several modules share lives in moecomp/core/detail/ or
moecomp/cuda/core/detail/, which any moecomp header may include. Prints every violation and exits 1 if there
is one.

It also checks that every detail header refuses to be included first: its first moecomp include is
moecomp/core/detail/internal_header.hpp, which stops the compilation unless a public header came before.

Programs built on the library (the tool, the Python binding) use its public API only: with --programs DIR...,
every C++ source under those directories is checked for a `detail::` name or a `/detail/` include (comments
aside).

Usage: check_boundaries.py INCLUDE_DIR [--programs DIR ...]"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](moecomp/[^>"]+)[>"]', re.MULTILINE)


def module_of(path):
    """core, distance, cluster, ot, io, interop, ... for moecomp/<m>/... and moecomp/cuda/<m>/...; None for the
    top-level headers (moecomp/moecomp.hpp)."""
    parts = path.split("/")[1:]
    if parts and parts[0] == "cuda":
        parts = parts[1:]
    return parts[0] if len(parts) > 1 else None


def main():
    root = sys.argv[1]
    violations, headers = [], 0
    for folder, _, files in os.walk(os.path.join(root, "moecomp")):
        for name in sorted(files):
            if not name.endswith((".hpp", ".cuh", ".h")):
                continue
            full = os.path.join(folder, name)
            here = os.path.relpath(full, root).replace(os.sep, "/")
            headers += 1
            with open(full, encoding="utf-8") as f:
                text = f.read()
            targets = INCLUDE.findall(text)
            guard = "moecomp/core/detail/internal_header.hpp"
            if "/detail/" in here and here != guard and (not targets or targets[0] != guard):
                violations.append(f"{here}: a detail header must include {guard} first, so that it refuses "
                                  f"direct inclusion")
            for target in targets:
                if "/detail/" not in target:
                    continue
                owner = module_of(target)
                if owner == "core" or owner == module_of(here):
                    continue
                violations.append(f"{here} includes {target}: a detail header of module '{owner}' "
                                  f"(move what is shared to core/detail, or use the module's public header)")
    programs = sys.argv[sys.argv.index("--programs") + 1:] if "--programs" in sys.argv else []
    sources = 0
    for program in programs:
        for folder, _, files in os.walk(program):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
                    continue
                full = os.path.join(folder, name)
                sources += 1
                with open(full, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        code = line.split("//", 1)[0]
                        if "detail::" in code or re.search(r'#\s*include\s*[<"][^>"]*/detail/', code):
                            violations.append(f"{full}:{number}: a program uses the library's detail: {line.strip()}")
    for v in violations:
        print("FAIL", v)
    print(f"check_boundaries: {headers} headers, {sources} program sources, {len(violations)} violations")
    sys.exit(1 if violations else 0)


if __name__ == "__main__":
    main()
