"""Bare training loops, and the kit and the bare loop taking turns in one process.

A kit entry point, started by benchmarks/bench_kit_overhead.py through a
runner (reprokit/runners), like every kit process:

    python -m reprokit.kits.bench --specs specs.json --data-dir DIR [--rounds 5] [--warmup 5] [--steps 40] [--seed N]
        --out out.json

For every RunSpec in specs.json (one per seed model) it runs, round after
round, the kit with all its instrumentation (``reprokit.kits.run.run``: progress lines,
memory readings, per-window clocks, on-device loss sums, evaluation), the kit
with its per-step timing off, and twice the fastest idiomatic bare loop of the
same model, data, optimizer, batch size and threads with nothing else (the
second time is the bench's null check: a loop against itself):

- PyTorch: eager; zero_grad(set_to_none=True), forward, cross_entropy, backward,
  step; no .item() per step.
- TensorFlow: one ``tf.function`` train step with a GradientTape (the kit's own
  execution model); traced once per shape.

Both bare loops take the same uint8 NHWC batches of the same .npz in the same
order, staged as tensors on the device before their clock starts (no numpy
slicing or conversion in their timed steps, which the kit does inside its
own), and scale and resize them on the device as the kit does. Each side
builds a fresh model per round, runs ``warmup`` untimed steps, then ``steps``
timed steps; samples/s = steps * batch / seconds. Where one epoch of the data
is shorter than that, the steps span the fewest epochs of one length that hold
them (a window of a third of a second cannot show 3%): the kit evaluates
between epochs outside its clock, and the bare loop takes the same batches
straight on. The kit's figure is the one it reports (``timing.samples_per_s``,
its epochs' training windows); an outer clock around the same windows, taken by
a thin wrapper of its Backend, checks it.
Rounds take the four sides in balanced blocks of four orders (``orders``), so
drift and whatever one side leaves to the next cancel in the pairwise ratios.
After a dropped warm-up round, this process runs ``rounds`` rounds; the
caller pools the rounds of several processes and decides when they are
enough. The process CPU time over the same steps is kept as well: where other
work shares the CPU, samples per CPU second is the steadier figure (the gate
still uses the wall-clock one the kit reports). Standard library,
numpy, the framework and reprokit/kits/ only.

At N devices (the specs' ``devices``) the kit runs data-parallel (reprokit/kits/training_loop/distributed.py) and
so does its bare loop: PyTorch's N ranks under torchrun each run this process's rounds, in step and in the same
orders (one seed), DDP in both loops, rank 0 writing the output; TensorFlow's and JAX's one process holds N
devices (stand-ins on a CPU), MirroredStrategy and a sharded step in both.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from reprokit.kits import parts
from reprokit.kits.contract.names import PROGRESS_MARKER
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.devices import stand_ins
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.ranks import kit_run
from reprokit.kits.training_loop import bare

# --- the kit ----------------------------------------------------------------------------------

class _OuterClock:
    """Wraps the kit's Backend: a clock outside the kit's own around the same timed steps.

    Each epoch's window starts (after a sync) when the loop asks for its first
    timed batch, before it is sliced and handed to the device, and stops when
    the loop reads its sums after the epoch's end-of-training sync; the windows
    add up. Adds one generator hop per batch, nothing else.
    """

    def __init__(self, backend, warmup: int) -> None:
        self._b = backend
        self._warmup = warmup
        self._fetched = 0
        self._open: tuple[float, float] | None = None
        self.seconds = self.cpu_s = 0.0

    def __getattr__(self, name):
        return getattr(self._b, name)

    def train_batches(self, epoch: int):
        inner = iter(self._b.train_batches(epoch))
        while True:
            if self._fetched >= self._warmup and self._open is None:
                self._b.sync()
                self._open = time.perf_counter(), time.process_time()
            batch = next(inner, None)
            if batch is None:
                return
            self._fetched += 1
            yield batch

    def take_sums(self):
        # an epoch's first call after its timed steps began ends them (the warmup's evaluation steps call it before)
        if self._open is not None:
            self.seconds += time.perf_counter() - self._open[0]
            self.cpu_s += time.process_time() - self._open[1]
            self._open = None
        return self._b.take_sums()


def kit_spec(spec: RunSpec, warmup: int, steps: int, step_timing: bool = True) -> RunSpec:
    """The RunSpec cut to warmup + steps in the fewest equal epochs its data holds (bare.epochs_of), evaluation
    kept, on two batches."""
    epochs, length = bare.epochs_of(spec.data.train_samples // spec.train.batch_size, warmup + steps)
    return dataclasses.replace(
        spec, train=dataclasses.replace(spec.train, epochs=epochs, warmup_steps=warmup, max_steps_per_epoch=length),
        measure=dataclasses.replace(spec.measure, step_timing=step_timing),
        data=dataclasses.replace(spec.data, test_samples=min(spec.data.test_samples, 2 * spec.train.eval_batch_size)))


def kit_round(spec: RunSpec, data_dir: Path, warmup: int, steps: int, step_timing: bool = True) -> dict:
    """One in-process run of the kit: its reported samples/s and the outer clock's."""
    import reprokit.kits.run as kitrun

    s = kit_spec(spec, warmup, steps, step_timing)
    clocks: list[_OuterClock] = []
    real_train = kitrun.train

    def clocked_train(backend, *args, **kwargs):
        clocks.append(_OuterClock(backend, warmup))
        return real_train(clocks[-1], *args, **kwargs)

    kitrun.train = clocked_train
    try:
        result = kitrun.run(s.to_dict(), data_dir)       # the kit reads its spec as the JSON a runner writes
    finally:
        kitrun.train = real_train
    timing, eff = result["timing"], result["effective"]
    if eff["train_steps_per_epoch"] != [s.train.max_steps_per_epoch] * s.train.epochs:
        raise RuntimeError(f"the kit ran {eff['train_steps_per_epoch']} steps, not {s.train.epochs} epoch(s) of "
                           f"{s.train.max_steps_per_epoch}")
    samples = steps * spec.train.batch_size
    clock = clocks[-1]
    ranks = int(os.environ.get("WORLD_SIZE", 1))      # a DDP rank reports its own share's samples/s
    return {"kit_sps": timing["samples_per_s"] * ranks, "outer_sps": samples / clock.seconds,
            "kit_cpu_sps": samples / clock.cpu_s,
            "step_p50_s": timing["step_s"]["p50"], "data_wait_fraction": timing["data_wait_fraction"],
            "wall_s": timing["wall_s"]}


# --- alternation ------------------------------------------------------------------------------

SIDES = ("kit", "bare", "untimed", "bare again")
# A Williams square: in these four orders every side takes every place once and directly follows each other side
# once, so what one side leaves to the next (a warm cache, a busy allocator) favours none of them over a block.
BALANCED = ((0, 1, 3, 2), (1, 2, 0, 3), (2, 3, 1, 0), (3, 0, 2, 1))


def orders(rng: random.Random):
    """Round after round, blocks of four orders: the square's rows in a shuffled sequence, its places given to the
    sides by a fresh shuffle each block (both keep the balance; a cyclic rotation would always put the same side
    before the kit)."""
    while True:
        sides, rows = list(SIDES), list(BALANCED)
        rng.shuffle(sides)
        rng.shuffle(rows)
        for row in rows:
            yield tuple(sides[place] for place in row)


def _side(side: str, spec: RunSpec, data_dir: Path, arrays: datalib.Arrays, warmup: int, steps: int) -> dict:
    """One side's figures for a round's row."""
    if side == "kit":
        return kit_round(spec, data_dir, warmup, steps)
    if side == "untimed":                 # the kit with its per-step timing off: what the timing costs
        untimed = kit_round(spec, data_dir, warmup, steps, step_timing=False)
        return {"untimed_sps": untimed["kit_sps"], "untimed_outer_sps": untimed["outer_sps"]}
    wall, cpu = parts.bare_loop(spec.framework).loop(spec, arrays, warmup, steps)
    samples = steps * spec.train.batch_size
    key = "bare" if side == "bare" else "again"      # the bare loop once more: the bench's null check
    return {f"{key}_sps": samples / wall, f"{key}_cpu_sps": samples / cpu}


def compare(spec: RunSpec, data_dir: Path, rounds: int, warmup: int, steps: int, seed: int, log=print) -> dict:
    """A dropped warm-up round, then ``rounds`` rounds of the kit, the kit without step timing and the bare
    loop twice, in orders drawn by ``seed``. How many rounds are enough is the caller's call: it pools the rounds
    of several processes, since a bias one process gives a side stays for all its rounds."""
    d = spec.data
    arrays = datalib.load(data_dir / d.file, d.sha256, d.train_samples, d.test_samples)
    full = len(arrays.x_train) // spec.train.batch_size
    if not full:
        raise SystemExit(f"{spec.experiment}: its {len(arrays.x_train)} training samples hold no batch of "
                         f"{spec.train.batch_size}")
    epochs, length = bare.epochs_of(full, warmup + steps)
    steps = epochs * length - warmup          # whole epochs of one length: at most epochs - 1 more than asked
    draw = orders(random.Random(seed))
    rows: list[dict] = []
    for r in range(rounds + 1):          # round 0 warms the process (allocator, kernels, caches): dropped
        row = {"order": next(draw) if r else SIDES}       # the dropped round takes no order from the blocks
        for side in row["order"]:
            gc.collect()
            row.update(_side(side, spec, data_dir, arrays, warmup, steps))
        row["timing_ratio"] = row["kit_sps"] / row["untimed_sps"]
        row["ratio"] = row["kit_sps"] / row["bare_sps"]
        row["null_ratio"] = row["bare_sps"] / row["again_sps"]
        row["outer_ratio"] = row["outer_sps"] / row["bare_sps"]
        row["cpu_ratio"] = row["kit_cpu_sps"] / row["bare_cpu_sps"]
        if r:
            rows.append(row)
        log(f"  {spec.framework:<10} {spec.experiment:<26} round {r}{' (warm-up, dropped)' if r == 0 else ''}"
            f" [{', '.join(row['order'])}]: kit {row['kit_sps']:7.1f} samples/s (outer clock {row['outer_sps']:7.1f}), "
            f"bare {row['bare_sps']:7.1f}, kit/bare {row['ratio']:.3f} (per CPU second {row['cpu_ratio']:.3f}); "
            f"step timing off {row['untimed_sps']:7.1f}, on/off {row['timing_ratio']:.3f}; bare again "
            f"{row['again_sps']:7.1f}, bare/bare again {row['null_ratio']:.3f}")
    return {"experiment": spec.experiment, "framework": spec.framework, "model": spec.model.name,
            "batch_size": spec.train.batch_size, "warmup": warmup, "steps": steps,
            "epochs": epochs, "seed": seed,
            "rounds": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=Path, required=True, help="JSON list of resolved RunSpecs, one framework")
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5, help="rounds per model, after a dropped one")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per side and round, over as many epochs "
                                                              "as the data needs (rounded up to whole epochs)")
    ap.add_argument("--seed", type=int, help="draws the round orders (default: a new one, printed and kept in "
                                             "the output)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    seed = random.SystemRandom().randrange(2 ** 32) if args.seed is None else args.seed
    specs = [RunSpec.from_dict(s) for s in json.loads(args.specs.read_text())]
    frameworks = {s.framework for s in specs}
    if len(frameworks) != 1:
        raise SystemExit(f"one framework per process, got {sorted(frameworks)}")
    devices = {s.devices for s in specs}
    if len(devices) != 1:
        raise SystemExit(f"one device count per process, got {sorted(devices)}")
    if specs[0].framework == "pytorch" and specs[0].devices > 1 and "RANK" not in os.environ:
        # torchrun's ranks take the same rounds in the same orders (one seed), in step; rank 0 writes the output
        return subprocess.call(kit_run.torchrun(specs[0].devices, "reprokit.kits.bench",
                                                [*(argv if argv is not None else sys.argv[1:]), "--seed", str(seed)]))
    if os.environ.get("RANK", "0") != "0":
        args.out = kit_run.rank_out(args.out, int(os.environ["RANK"]))
    stand_ins.before_import(specs[0].framework, specs[0].devices, specs[0].device)
    parts.bare_loop(specs[0].framework).process_setup(specs[0])
    _tell(f"  reprokit.kits.bench seed {seed}: --seed {seed} draws the same round orders again")
    out = []
    for spec in specs:
        out.append(compare(spec, args.data_dir, args.rounds, args.warmup, args.steps, seed, log=_tell))
    args.out.write_text(json.dumps(out, indent=1))
    return 0


def _tell(line: str) -> None:
    """A line for the person watching the bench, through the runner's progress channel (rank 0's, at N)."""
    if os.environ.get("RANK", "0") != "0":
        return
    print(PROGRESS_MARKER + json.dumps({"bench": line}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
