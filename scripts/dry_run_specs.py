"""The specs the plan makes for a set of requests, as a dry run makes them, in one JSON file: run it before and
after a change that must not change the plan, then compare the two files (`cmp`).

    python scripts/dry_run_specs.py OUT.json

Each request is planned on this host's CPU and on a stand-in GPU host (tests/gpu_host.py: four H200s). The code
provenance fields and the ids derived from them are left out: every commit changes those.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import gpu_host  # noqa: E402  (tests/gpu_host.py, found through the path above)

from reprokit import cli  # noqa: E402
from reprokit.environments import topology  # noqa: E402
from reprokit.execute import compose  # noqa: E402

REQUESTS = {"default": [], "standard": ["--profile", "standard"], "ablation": ["--ablation"], "all": ["--all"],
            "one-framework": ["--frameworks", "pytorch"], "verbatim": ["--variants", "verbatim"],
            "tuned": ["--variants", "tuned"],
            "script": ["--script", f"pytorch={REPO / 'tests/corpus/mnist_examples/main.py'}",
                       "--frameworks", "pytorch"]}


def _without_code(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_code(v) for k, v in x.items() if k != "run_id" and "code" not in k}
    if isinstance(x, list):
        return [_without_code(v) for v in x]
    return x


class _Env:
    """What tests/gpu_host.py sets, set for this process."""
    def setenv(self, name: str, value: str) -> None:
        os.environ[name] = value


def main(out: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="dry-run-specs-"))
    where = ["--dry-run", "--backend", "local", "--python", sys.executable, "--state-dir", str(tmp / "state"),
             "--data-dir", str(tmp / "data"), "--reports-dir", str(tmp / "reports")]
    found: dict[str, Any] = {}
    for device in ("cpu", "gpu"):
        if device == "gpu":
            (tmp / "gpu").mkdir()
            gpu_host.install(tmp / "gpu", _Env())
            os.environ.pop(topology.FAKE_SLOTS_ENV, None)
        for name, argv in REQUESTS.items():
            specs = compose.build(cli.parse([*argv, *where])).specs
            found[f"{name}/{device}"] = [_without_code(s.to_dict()) for s in specs]
            print(f"{name} on {device}: {len(specs)} specs", file=sys.stderr)
    out.write_text(json.dumps(found, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
