"""The spec options the JAX kit cannot honour, as data: the plan refuses them with one sentence before any
run (standard library only: the host reads this without JAX).

Each limit names the RunSpec field (a dotted path), a test of its value, and why, in one sentence the
host can print as it is. What the kit does honour is not here: channel dropout (nnx.Dropout's
broadcast_dims), BatchNorm's keep factor and epsilon, Adam and SGD with (Nesterov) momentum, bf16
compute over float32 parameters on the built-in models (Flax layers' dtype), bilinear resizing.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limit:
    field: str                                  # the RunSpec field, dotted
    values: str                                 # the values refused, in words
    refuses: Callable[[dict[str, Any]], bool]   # of the whole RunSpec (its JSON form)
    why: str


def _intra(spec: dict[str, Any]) -> int | str:
    value: int | str = spec["numerics"]["cpu_threads"]["intra_op"]
    return value


LIMITS = (
    Limit("numerics.cpu_threads.intra_op", "a count other than 1 and every CPU the run may use",
          lambda s: _intra(s) != "auto" and int(_intra(s)) not in (1, len(os.sched_getaffinity(0))),
          "XLA's CPU backend runs on one thread (--xla_cpu_multi_thread_eigen=false) or on every CPU the process "
          "may use, and has no flag for a count between (intra_op_parallelism_threads=N is no XLA flag)"),
    Limit("numerics.precision", "bf16_mixed with model.name custom",
          lambda s: s["numerics"]["precision"] == "bf16_mixed" and s["model"]["name"] == "custom",
          "a Flax module computes in the dtype its own layers were built with: the kit cannot make a user's "
          "nnx.Module compute in bfloat16, so the user's JAX builder must build it so and the spec say fp32"),
    Limit("numerics.precision", "fp16_mixed",
          lambda s: s["numerics"]["precision"] == "fp16_mixed",
          "the JAX kit has no loss scaling, which fp16 training needs: use bf16_mixed on a GPU of compute capability "
          "8.0 or newer, or fp32"),
    Limit("model.name", "resnet50", lambda s: s["model"]["name"] == "resnet50",
          "the JAX kit has no built-in ResNet-50 yet: run the experiment without jax in --frameworks, or give it as "
          "a custom model with a Flax builder"),
    Limit("model.jax", "missing where model.name is custom",
          lambda s: s["model"]["name"] == "custom" and not (s["model"].get("builders") or {}).get("jax"),
          "a custom model needs a Flax builder for JAX: model.jax = \"module:function\" returning a flax.nnx.Module"),
    Limit("hooks", "an input, evaluate or metrics hook named for other frameworks but not for jax",
          lambda s: any(h and not h.get("jax") for h in (s.get("hooks") or {}).values()),
          "the JAX kit would run its own pipeline, evaluation or metrics in place of the user's: name the hook's "
          "JAX function too, or run without jax in --frameworks"),
)


def refusals(spec: dict[str, Any]) -> list[str]:
    """One sentence per limit this RunSpec (its JSON form) runs into; [] where the JAX kit can run it."""
    return [f"{limit.field}: {limit.values} cannot run in JAX: {limit.why}" for limit in LIMITS if limit.refuses(spec)]
