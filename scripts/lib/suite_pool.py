"""Runs the `suite` test binary's tests on a pool of workers, one test at a time each.

    python3 suite_pool.py [--lane PREFIX]... BINARY LOG ENV_FILE... [-- FILTER...]

Each ENV_FILE (`export NAME='value'` lines, as scripts/test-servers writes
them) is one worker: the servers its tests use. A worker runs one test at a
time, as its own process (`BINARY --exact NAME --test-threads=1`), so tests
on different workers never share a stand-in MongoDB, which answers one
request at a time, and a test's wait for a lease to expire or a change to
arrive costs no other test anything. Workers take the next test from one
queue, in the binary's order. FILTERs pick tests as libtest's name filters
do (`verify_command::`).

`--lane PREFIX` puts the tests whose names start with PREFIX in one lane:
one worker runs them one after another, first in the queue. It is for tests
that take turns on a server every worker shares (tests/support/turn.rs):
spread over the workers, all but one of them would wait for the turn,
idle, while the queue has other work for them.

Prints one line per test as it ends (its output too when it failed), then
returns. LOG receives each test's own output under a `Running tests/suite.rs`
line, the form scripts/lib/test_summary.py reads. Exit status: 0 when every
test passed, 1 otherwise.
"""
import os
import queue
import shlex
import subprocess
import sys
import threading
import time


def read_env_file(path):
    """The variables of an env file scripts/test-servers wrote."""
    env = {}
    with open(path) as lines:
        for line in lines:
            line = line.strip()
            if not line.startswith("export "):
                continue
            name, _, value = line[len("export ") :].partition("=")
            words = shlex.split(value)
            env[name] = words[0] if words else ""
    return env


def list_tests(binary, filters, *options):
    listed = subprocess.run(
        [binary, "--list", "--format", "terse", *options, *filters],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line[: -len(": test")] for line in listed.splitlines() if line.endswith(": test")]


def tests_to_run(binary, filters):
    """The tests FILTERs pick, less the `#[ignore]`d ones (entry points of
    child processes, which libtest would run as `1 ignored`, neither passed
    nor failed)."""
    ignored = set(list_tests(binary, filters, "--ignored"))
    return [test for test in list_tests(binary, filters) if test not in ignored]


class Pool:
    def __init__(self, binary, log_path, worker_envs, lanes, tests):
        """`lanes`: lists of tests run one after another by one worker,
        queued before `tests`, each of which any worker takes."""
        self.binary = binary
        self.log = open(log_path, "a")
        self.worker_envs = worker_envs
        self.todo = queue.Queue()
        for lane in lanes:
            self.todo.put(lane)
        for test in tests:
            self.todo.put([test])
        self.total = len(tests) + sum(len(lane) for lane in lanes)
        self.done = 0
        self.failed = 0
        self.lock = threading.Lock()

    def run(self):
        workers = [
            threading.Thread(target=self.work, args=(n, env), daemon=True)
            for n, env in enumerate(self.worker_envs, start=1)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        self.log.close()
        return 0 if self.failed == 0 else 1

    def work(self, number, servers):
        env = {**os.environ, **servers}
        while True:
            try:
                lane = self.todo.get_nowait()
            except queue.Empty:
                return
            for test in lane:
                started = time.monotonic()
                ran = subprocess.run(
                    [self.binary, "--exact", test, "--test-threads=1"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
                self.report(number, test, ran, time.monotonic() - started)

    def report(self, worker, test, ran, seconds):
        with self.lock:
            self.done += 1
            passed = ran.returncode == 0
            if not passed:
                self.failed += 1
            verdict = "ok" if passed else f"FAILED (exit {ran.returncode})"
            print(
                f"[{self.done}/{self.total}] test {test} ... {verdict} "
                f"({seconds:.1f} s, worker {worker})",
                flush=True,
            )
            if not passed:
                print(ran.stdout, flush=True)
            self.log.write("     Running tests/suite.rs\n")
            self.log.write(ran.stdout)
            if not ran.stdout.endswith("\n"):
                self.log.write("\n")
            self.log.flush()


def main():
    args = sys.argv[1:]
    filters = []
    if "--" in args:
        at = args.index("--")
        args, filters = args[:at], args[at + 1 :]
    prefixes = []
    while args[:1] == ["--lane"] and len(args) > 1:
        prefixes.append(args[1])
        args = args[2:]
    binary, log_path, *env_files = args
    if not env_files:
        sys.exit("suite_pool.py: no ENV_FILE, no worker")
    tests = tests_to_run(binary, filters)
    lanes = [[t for t in tests if t.startswith(prefix)] for prefix in prefixes]
    lanes = [lane for lane in lanes if lane]
    in_lanes = {t for lane in lanes for t in lane}
    tests = [t for t in tests if t not in in_lanes]
    workers = [read_env_file(path) for path in env_files]
    total = len(tests) + len(in_lanes)
    print(f"suite: {total} tests on {len(workers)} workers", flush=True)
    sys.exit(Pool(binary, log_path, workers, lanes, tests).run())


if __name__ == "__main__":
    main()
