"""The last lines of scripts/test: what `cargo test --no-fail-fast` did.

    python3 test_summary.py CARGO_LOG SKIP_LOG CARGO_STATUS SECONDS

CARGO_LOG is cargo's output (stdout and stderr), SKIP_LOG the lines tests
wrote through tests/support/skip.rs (`SKIPPED <binary>::<test>: <reason>`).
A test is named `<binary>::<test path>` here and there alike: in the
`suite` binary the path is `<file>::<test>` (`suite::lease_protocol::…`).
Prints the skipped tests with their reasons, then the failed ones, each
with where it panicked and the first line of what it said (CI shows the
end of a log), then one line:

    tests: 250 passed, 0 failed, 12 skipped (1021 s)

A skipped test passes as far as libtest knows; it is counted as skipped,
not passed. A test binary that started but printed no result (it crashed,
or was killed) counts as one failure. If cargo failed and no test did (a
build error), the line says so instead of counting nothing as a pass.
Exit status: 0.
"""
import re
import sys

RUNNING = re.compile(r"^\s*Running (?:unittests )?(\S+)(?: \(.+\))?\s*$")
RESULT = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;"
)
FAILED_LINE = re.compile(r"^test (\S+) \.\.\. .*FAILED\s*$")
SKIPPED = re.compile(r"^SKIPPED (\S+?): (.*)$")
SECTION = re.compile(r"^---- (\S+) stdout ----$")
PANIC = re.compile(r"^thread '[^']*'(?: \(\d+\))? panicked at (\S+?):?$")
# How much of a panic's message the closing list repeats.
MESSAGE_CHARS = 300


def binary_name(source):
    """`tests/suite.rs` -> `suite`; `src/lib.rs` -> `lib`."""
    name = source.rsplit("/", 1)[-1]
    return name[:-3] if name.endswith(".rs") else name


def main():
    cargo_log, skip_log, status, seconds = sys.argv[1:5]
    status = int(status)
    passed = failed = 0
    failures = []  # "binary::test"
    crashed = []
    current = None
    has_result = False
    in_failures_list = False
    section = None  # the test whose captured output is being read
    panics = {}  # "binary::test" -> "file:line: first line of the message"
    panic_at = None
    with open(cargo_log, errors="replace") as log:
        for line in log:
            line = line.rstrip("\n")
            running = RUNNING.match(line)
            if running:
                if current is not None and not has_result:
                    crashed.append(current)
                current = binary_name(running.group(1))
                has_result = False
                in_failures_list = False
                continue
            result = RESULT.match(line)
            if result:
                has_result = True
                passed += int(result.group(2))
                failed += int(result.group(3))
                in_failures_list = False
                continue
            opened = SECTION.match(line)
            if opened:
                section = f"{current}::{opened.group(1)}"
                continue
            if panic_at is not None:
                if line.strip():
                    panics.setdefault(section, f"{panic_at}: {line.strip()[:MESSAGE_CHARS]}")
                    panic_at = None
                continue
            panicked = PANIC.match(line)
            if panicked and section is not None:
                panic_at = panicked.group(1)
                continue
            failed_test = FAILED_LINE.match(line)
            if failed_test and current is not None:
                failures.append(f"{current}::{failed_test.group(1)}")
                continue
            # libtest's closing list: "failures:" then "    name" lines.
            if line == "failures:":
                in_failures_list = True
                continue
            if in_failures_list:
                if line.startswith("    ") and current is not None:
                    name = f"{current}::{line.strip()}"
                    if name not in failures:
                        failures.append(name)
                elif line.strip():
                    in_failures_list = False
    if current is not None and not has_result:
        crashed.append(current)

    skips = {}
    try:
        with open(skip_log, errors="replace") as log:
            for line in log:
                match = SKIPPED.match(line.strip())
                if match:
                    skips.setdefault(match.group(1), match.group(2))
    except FileNotFoundError:
        pass
    # A test that said it skipped and then failed anyway is a failure.
    skipped = {name: why for name, why in skips.items() if name not in failures}
    passed = max(passed - len(skipped), 0)
    failed += len(crashed)

    print()
    if skipped:
        print("skipped (could not run on the given servers):")
        for name, why in sorted(skipped.items()):
            print(f"  {name}: {why}")
    if failures or crashed:
        print("failed:")
        for name in failures:
            print(f"  {name}")
            if name in panics:
                print(f"      panicked at {panics[name]}")
        for binary in crashed:
            print(f"  {binary} (the test binary ended without a result)")
    if status != 0 and failed == 0:
        print(
            f"tests: none failed, but cargo test exited {status} "
            f"(a build error?); {passed} passed, {len(skipped)} skipped ({seconds} s)"
        )
    else:
        print(
            f"tests: {passed} passed, {failed} failed, {len(skipped)} skipped ({seconds} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
