#!/usr/bin/env python3
"""Checks the test counts of a `scripts/test.sh` run against the committed floor.

    scripts/test-counts.py LOG FLOOR            # check
    scripts/test-counts.py --write LOG FLOOR    # rewrite FLOOR from LOG

LOG is the output of the run's `cargo test` commands. Cargo names each test
binary before running it (`Running tests/cli.rs (target/debug/deps/cli-…)`,
`Doc-tests policy`) and ends each with a `test result:` line. A binary is named
here by its package's library and its target: `tuner tests/cli.rs`, `kernels
src/lib.rs`, `policy doc-tests` (two packages have a `tests/merge.rs`; cargo runs
a package's library tests first, which gives the package).

FLOOR has one line per test binary, `<passed> <ignored> <binary>`: the fewest
tests it must pass, and the fewest it may list as ignored (GPU tests). The check
fails when a binary of FLOOR did not run or reported no result, passed fewer
tests than its floor, or passed and ignored fewer together than its floors
together (an ignored test may become a passing one, not vanish); when a binary
ran that FLOOR does not list; and so when the total falls below the sum of the
floors. Lower a floor only in the commit that removes tests on purpose.
"""

import re
import sys

RUNNING = re.compile(r"^\s+Running (?:unittests )?(\S+) \((\S+)\)\s*$")
DOC_TESTS = re.compile(r"^\s+Doc-tests (\S+)\s*$")
RESULT = re.compile(
    r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored"
)


def crate_of(executable):
    """`target/debug/deps/cli-0123abcd` -> `cli`."""
    name = executable.rsplit("/", 1)[-1]
    return re.sub(r"-[0-9a-f]{16}$", "", name)


def results(log):
    """{binary: (passed, failed, ignored) or None} in the order cargo ran them."""
    found = {}
    package = None
    current = None
    for line in log.splitlines():
        running = RUNNING.match(line)
        doc = DOC_TESTS.match(line)
        if running:
            path, executable = running.groups()
            if path == "src/lib.rs":
                package = crate_of(executable)
            current = f"{package or crate_of(executable)} {path}"
            found.setdefault(current, None)
        elif doc:
            current = f"{doc.group(1)} doc-tests"
            found.setdefault(current, None)
        elif current is not None:
            result = RESULT.match(line)
            if result:
                found[current] = tuple(int(n) for n in result.groups())
                current = None
    # Targets with no test harness (criterion benches) report no result.
    return {k: v for k, v in found.items() if v is not None or not k.split(" ")[1].startswith("benches/")}


def read_floor(path):
    floor = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(" ", 2)
            if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
                sys.exit(f"{path}:{number}: expected `<passed> <ignored> <binary>`, not {line!r}")
            floor[parts[2]] = (int(parts[0]), int(parts[1]))
    return floor


def write_floor(path, found):
    with open(path, encoding="utf-8") as f:
        header = [line for line in f if line.startswith("#")]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(header)
        for binary, (passed, _failed, ignored) in found.items():
            f.write(f"{passed} {ignored} {binary}\n")


def check(found, floor, floor_path):
    problems = []
    for binary, (least, least_ignored) in floor.items():
        got = found.get(binary)
        if got is None:
            problems.append(f"{binary}: expected by {floor_path}, but it reported no tests")
            continue
        passed, _failed, ignored = got
        if passed < least:
            problems.append(f"{binary}: {passed} passed, below its floor of {least}")
        elif passed + ignored < least + least_ignored:
            problems.append(
                f"{binary}: {passed} passed and {ignored} ignored, below its floors of "
                f"{least} and {least_ignored}"
            )
    for binary in found:
        if binary not in floor:
            problems.append(f"{binary}: ran, but {floor_path} has no floor for it (add one)")
    total = sum(v[0] for v in found.values() if v is not None)
    least_total = sum(v[0] for v in floor.values())
    if total < least_total:
        problems.append(f"{total} tests passed in all, below the floor of {least_total}")
    return problems, total, least_total


def main(argv):
    write = argv[:1] == ["--write"]
    args = argv[1:] if write else argv
    if len(args) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    log_path, floor_path = args
    with open(log_path, encoding="utf-8", errors="replace") as f:
        found = results(f.read())
    if write:
        missing = [b for b, v in found.items() if v is None]
        if missing:
            sys.exit(f"test-counts: not writing {floor_path}: no result from {', '.join(missing)}")
        write_floor(floor_path, found)
        print(f"test-counts: wrote {len(found)} floors to {floor_path}")
        return 0
    problems, total, least_total = check(found, read_floor(floor_path), floor_path)
    for problem in problems:
        print(f"test-counts: FAIL: {problem}")
    if not problems:
        print(
            f"test-counts: {len(found)} test binaries, {total} passed, "
            f"floor {least_total} ({floor_path})"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
