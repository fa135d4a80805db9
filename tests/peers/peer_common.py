"""Shared by the peer checks: import the peer or skip (exit 77) — unless MOECOMP_REQUIRE_PEERS=1 (CI), where a
missing peer is a failure, so CI can never pass by skipping."""
import importlib
import os
import subprocess
import sys

SKIP = 77


def require(*modules):
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError as e:
            if os.environ.get("MOECOMP_REQUIRE_PEERS") == "1":
                print(f"FAILED: peer module {name} is missing ({e}) and MOECOMP_REQUIRE_PEERS=1")
                sys.exit(1)
            print(f"SKIPPED: peer module {name} is not importable by {sys.executable} ({e}); "
                  f"install python3-{name} to run this check")
            sys.exit(SKIP)
    return loaded


class ToolRunner:
    """Base of each script's Checker: runs the moecomp tool in a scratch folder and counts checks/failures."""

    def __init__(self, tool, tmp):
        self.tool, self.tmp = tool, tmp
        self.checks = self.failures = 0

    def path(self, name):
        return os.path.join(self.tmp, name)

    def run(self, *args):
        return subprocess.run([self.tool, *args], capture_output=True, text=True)
