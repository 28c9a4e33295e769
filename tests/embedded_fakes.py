"""Stand-ins for engine.embedded's heavy conversion, for the tests that prepare both models side by
side. They are module-level so that a child process started with 'spawn' can import them (the
parent hands its `_export_hf` to the children, and a closure cannot be pickled)."""
import os
import time
from pathlib import Path

from engine.errors import UserError

RENDEZVOUS = "SEQUOIA_TEST_RENDEZVOUS"  # a folder where each export notes that it began
WAIT_S = 30


def _role(out: Path) -> str:
    return out.name.lstrip(".").split("-")[0]  # ".draft-test-fake.tmp-123" -> "draft"


def _meet(out: Path) -> None:
    """With $SEQUOIA_TEST_RENDEZVOUS set: note this export began and wait until the other did too,
    which only happens when both run at the same time."""
    folder = os.environ.get(RENDEZVOUS)
    if not folder:
        return
    (Path(folder) / _role(out)).write_text(str(os.getpid()))
    deadline = time.monotonic() + WAIT_S
    while len(list(Path(folder).iterdir())) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{_role(out)}: the other model's export never began alongside this one")
        time.sleep(0.05)


def export(gguf: Path, out: Path, progress) -> None:
    """Like the `fake` fixture's converter; also records the process that ran it."""
    progress("convert", 0.0, f"converting {gguf.name}")
    (out / "config.json").write_text("{}")
    _meet(out)
    (out / "model.safetensors").write_bytes(gguf.read_bytes())
    (out / "pid").write_text(str(os.getpid()))
    progress("convert", 1.0, f"converted {gguf.name}")


def target_fails(gguf: Path, out: Path, progress) -> None:
    """The target's export fails with a UserError once the draft's has begun; the draft's never ends."""
    (out / "config.json").write_text("{}")
    _meet(out)
    if _role(out) == "target":
        raise UserError(f"{gguf.name}: the fake target conversion failed on purpose")
    time.sleep(WAIT_S)  # the parent stops this process long before
    raise RuntimeError("the draft export was not stopped")


def target_dies(gguf: Path, out: Path, progress) -> None:
    """The target's process is killed mid-conversion (no cleanup runs); the draft's export is normal."""
    (out / "config.json").write_text("{}")
    if _role(out) == "target":
        # os._exit skips the message queue's feeder thread: give it time to deliver "started", or
        # on a loaded machine the parent may take the death for a failed start and go on in its
        # own process, where this exit would end the test's process (seen with the cores busy)
        time.sleep(2)
        os._exit(9)
    export(gguf, out, progress)


def worker_dies(*args) -> None:
    """In place of engine.embedded._prepare_worker: a child that ends before it begins any work."""
    os._exit(3)


LOADED = "SEQUOIA_TEST_LOADED"  # a file the parent writes when it was told the draft is ready


def target_waits_for_the_parent(gguf: Path, out: Path, progress) -> None:
    """The target's export ends only after the parent heard that the draft was ready (it writes
    $SEQUOIA_TEST_LOADED then), which shows that it heard it while the target was still converting."""
    if _role(out) == "target":
        deadline = time.monotonic() + WAIT_S
        while not Path(os.environ[LOADED]).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the parent was never told that the draft was ready")
            time.sleep(0.05)
    export(gguf, out, progress)
