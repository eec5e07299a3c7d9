"""Records what a process of the suite's certificate batches reads (tests/batch_cache.py keys the batch by it).

On a folder that PYTHONPATH names for the batch's process and its kit processes only: Python imports
``sitecustomize`` at start-up, before any module of the batch. Each module the process loads for the first
time and each file it opens goes on a line of ``$REPROKIT_SUITE_RECORD/<pid>.txt`` as it happens, because a
kit ends with os._exit, which runs no exit handler.
"""
import os
import sys

_FOLDER = os.environ.get("REPROKIT_SUITE_RECORD")


def _install(folder: str) -> None:
    busy = []                       # the hook's own open() raises an "open" event: not recorded
    seen: set[str] = set()
    sink = None

    def hook(event: str, args: tuple) -> None:
        nonlocal sink
        if busy or event not in ("import", "open"):
            return
        what = args[0] if event == "import" else os.path.abspath(args[0]) if isinstance(args[0], str) else None
        if not what or (event, what) in seen:
            return
        seen.add((event, what))
        busy.append(1)
        try:
            if sink is None:
                sink = open(os.path.join(folder, f"{os.getpid()}.txt"), "a", buffering=1)
            sink.write(f"{event} {what}\n")
        finally:
            busy.clear()

    sys.addaudithook(hook)


if _FOLDER:
    _install(_FOLDER)
