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

    def check(self, label, ok, detail):
        self.checks += 1
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {detail}")

    def expect_error(self, label, args, *fragments):
        """Exit 2 with one 'moecomp: error:' line holding every fragment, no output file created, and an
        existing output file left exactly as it was."""
        self.checks += 1
        out = self.path("never.npy")
        if os.path.exists(out):
            os.remove(out)
        r = self.run(*args, "-o", out)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("moecomp: error:")
              and all(f in lines[0] for f in fragments) and not os.path.exists(out))
        keep, content = self.path("keep.npy"), b"an existing output file"
        with open(keep, "wb") as f:
            f.write(content)
        r2 = self.run(*args, "-o", keep)
        with open(keep, "rb") as f:
            ok = ok and r2.returncode == 2 and f.read() == content
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} error {label}: {lines[0] if lines else r.stderr!r}")

    def expect_directory_error(self, label, args, *fragments):
        """For a command whose -o is a directory: exit 2 with one 'moecomp: error:' line holding every fragment,
        no output directory and no temporary directory left behind."""
        self.checks += 1
        out = self.path("never")
        r = self.run(*args, "-o", out)
        lines = r.stderr.strip().splitlines()
        leftovers = [f for f in os.listdir(self.tmp) if ".moecomp-tmp-" in f]
        ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("moecomp: error:")
              and all(f in lines[0] for f in fragments) and not os.path.exists(out) and not leftovers)
        if ok:
            print(f"ok   error {label}: {lines[0]}")
        else:
            self.failures += 1
            print(f"FAIL error {label}: exit {r.returncode}, stderr {r.stderr!r}, leftovers {leftovers}, "
                  f"wanted {fragments}")
