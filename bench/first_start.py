"""First start as the app does it (README Results): `SEQUOIA_CACHE=<empty dir> python bench/first_start.py`:
Worker().load() on the embedded pair from a fresh cache, with a first load's device profile; each progress line with the elapsed time."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    t0 = time.perf_counter()
    from engine.worker import Worker
    w = Worker()
    job = w.load()
    last = None
    for item in job.stream():
        message = getattr(item, "message", item)
        if message != last:  # progress repeats a message while a fraction moves: one line per stage
            print(f"{time.perf_counter() - t0:7.1f} s  {message}", flush=True)
        last = message
    print(f"{time.perf_counter() - t0:7.1f} s  done: {job.result is not None} error={getattr(job, 'error', None)}",
          flush=True)


if __name__ == "__main__":
    import argparse   # no options: --help shows what the script does instead of doing it
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
