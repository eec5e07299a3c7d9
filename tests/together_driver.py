"""The TensorFlow kit's training batches, converted a few at a time, against the same batches converted one by one.

    PYTHONPATH=REPO TENSORFLOW_KIT_PYTHON tests/together_driver.py DATA_DIR SPEC.json...

Run by tests/test_kits.py. Per spec: how many batches the kit converts at a time, and per epoch (1 and 2) the
batches it gave, the batches one at a time give up to the epoch's cap, whether every pair is the same tensors in the
same order, and the sizes it gave. Prints one JSON line.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.tensorflow_kit.backend import Backend
from reprokit.kits.training_loop.feeding import NumpyFeeder

data_dir, out = Path(sys.argv[1]), []
for path in sys.argv[2:]:
    spec = RunSpec.from_dict(json.loads(Path(path).read_text()))
    d = spec.data
    arrays = datalib.load(data_dir / d.file, d.sha256, d.train_samples, d.test_samples)
    backend = Backend(spec)
    backend.build(arrays)
    one_by_one = NumpyFeeder(arrays, spec, backend._to_device)
    seen = {"together": backend.feeder.many[0]}
    for epoch in (1, 2):
        kit = [(x.numpy(), y.numpy()) for x, y in backend.train_batches(epoch)]
        ref = [(x.numpy(), y.numpy()) for x, y in one_by_one.train(epoch)][:spec.train.max_steps_per_epoch or None]
        seen[str(epoch)] = {"batches": len(kit), "one_by_one": len(ref), "sizes": [len(y) for _, y in kit],
                            "same": all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
                                        for a, b in zip(kit, ref))}
    out.append(seen)
print(json.dumps(out))
