"""Peak memory of a command, sampled finely — a measurement aid, never a test.

    python3 scripts/lib/rss_sampler.py OUT SECS -- COMMAND [ARGS...]

Runs COMMAND (its environment passed through; stdout to OUT.stdout, stderr —
the reconciler's log — to OUT.log), reads its VmRSS from /proc every 10 ms
and stops it with SIGINT (a clean shutdown) after SECS seconds if it has not
ended. Writes the samples to OUT.rss ("unix-seconds kib" a line) and prints
the peak and when it came. A high-water mark (VmHWM, GNU time's %M) says how
high RSS went; the samples say when, so the peak can be matched with the
log's events (docs/benchmarks.md, "Memory and the in-flight budget").
"""
import signal
import subprocess
import sys
import time

SAMPLE_EVERY_SECS = 0.01


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    out, limit_secs, command = sys.argv[1], float(sys.argv[2]), sys.argv[4:]
    with open(out + ".stdout", "w") as stdout, open(out + ".log", "w") as stderr:
        child = subprocess.Popen(command, stdout=stdout, stderr=stderr)
        started = time.time()
        samples = []
        while child.poll() is None:
            try:
                with open(f"/proc/{child.pid}/status") as status:
                    kib = next(int(l.split()[1]) for l in status if l.startswith("VmRSS"))
                samples.append((time.time(), kib))
            except (FileNotFoundError, StopIteration):
                break  # ended between poll() and the read
            if time.time() - started > limit_secs:
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(60)
                except subprocess.TimeoutExpired:
                    child.kill()
                break
            time.sleep(SAMPLE_EVERY_SECS)
        child.wait()
    with open(out + ".rss", "w") as rss:
        rss.writelines(f"{t:.3f} {kib}\n" for t, kib in samples)
    if not samples:
        sys.exit(f"no sample: the command ended at once (exit {child.returncode})")
    at, peak = max(samples, key=lambda s: s[1])
    print(f"{len(samples)} samples, peak {peak / 1024:.1f} MiB at +{at - started:.2f} s, "
          f"exit {child.returncode}")


if __name__ == "__main__":
    main()
