"""The settings TensorFlow reports at run time, under reprokit/kits/contract/settings.py's keys (docs/settings.md).

Apart from the Backend so that the probe reads them too without importing the kit's pitfalls.
"""
from __future__ import annotations

import os

import keras
import tensorflow as tf

from reprokit.kits.contract import settings as settings_lib

NO_PINNING = settings_lib.not_reported("TensorFlow has no pinned-memory switch: it stages copies to a GPU itself")


def framework_settings(gpus: list) -> dict:
    """The settings TensorFlow reports now, that need no model (docs/settings.md)."""
    # is_op_determinism_enabled is not public in tf.config
    from tensorflow.python.framework import config as tf_config

    read = settings_lib.read
    tf32 = read(tf.config.experimental.tensor_float_32_execution_enabled(),
                "tf.config.experimental.tensor_float_32_execution_enabled(): one switch for matmuls and convolutions")
    determinism = read(tf_config.is_op_determinism_enabled(),
                       "is_op_determinism_enabled() (enable_op_determinism or TF_DETERMINISTIC_OPS): one switch, "
                       "cuDNN's algorithms included")
    autotune = os.environ.get("TF_CUDNN_USE_AUTOTUNE")
    growth = {tf.config.experimental.get_memory_growth(gpu) for gpu in gpus}
    return {
        "tf32.matmul": tf32, "tf32.convolution": tf32,
        # TensorFlow autotunes cuDNN unless TF_CUDNN_USE_AUTOTUNE is set to 0 (its documented default)
        "cudnn_autotune": read(autotune not in ("0", "false", "False"),
                               f"TF_CUDNN_USE_AUTOTUNE {autotune!r}" if autotune else
                               "TF_CUDNN_USE_AUTOTUNE unset: TensorFlow's default, on"),
        "determinism.ops": determinism, "determinism.cudnn": determinism,
        "allocator.growth": (read(growth.pop() if len(growth) == 1 else "differs per GPU",
                                  "tf.config.experimental.get_memory_growth of each visible GPU") if gpus
                             else settings_lib.not_reported("no GPU: TensorFlow's GPU allocator is not used")),
        "allocator.config": settings_lib.allocator_config("tensorflow"),
        "threads.intra_op": read(tf.config.threading.get_intra_op_parallelism_threads(),
                                 "tf.config.threading.get_intra_op_parallelism_threads() (0: TensorFlow picks)"),
        "threads.inter_op": read(tf.config.threading.get_inter_op_parallelism_threads(),
                                 "tf.config.threading.get_inter_op_parallelism_threads() (0: TensorFlow picks)"),
    }


def model_settings(model, step) -> dict:
    """What the training step runs as: eagerly, a tf.function graph, or XLA (the step's own jit_compile); the
    model's dtype policy; its convolutions' data_format."""
    if tf.config.functions_run_eagerly():
        execution = settings_lib.read("eager", "tf.config.functions_run_eagerly() is True: every tf.function runs "
                                               "eagerly")
    elif step is None:
        execution = settings_lib.read("eager", "the training step is no tf.function")
    else:
        jit = getattr(step, "_jit_compile", None)
        execution = settings_lib.read("tf.function graph with XLA" if jit else "tf.function graph",
                                      f"the training step's tf.function, its jit_compile {jit!r}")
    policy = getattr(model, "dtype_policy", None) or keras.mixed_precision.global_policy()
    convs = [layer for layer in model._flatten_layers(include_self=False)
             if hasattr(layer, "data_format") and hasattr(layer, "kernel_size")]
    formats = sorted({layer.data_format for layer in convs})
    layout = (settings_lib.layout(formats == ["channels_last"], f"the convolutions' data_format ({', '.join(formats)})")
              if len(formats) == 1 else settings_lib.layout(None, "the model has no convolution" if not convs else
                                                            f"its convolutions mix {', '.join(formats)}"))
    return {"execution": execution, "data_layout": layout,
            "precision": settings_lib.precision(policy.compute_dtype, policy.variable_dtype,
                                                f"the model's Keras dtype policy {policy.name!r}")}


def pipeline_settings(dataset) -> dict:
    """The loader settings of a tf.data pipeline, from its own stages, outermost first: the largest parallelism of
    its maps, interleaves and batches (-1: autotuned) and the outermost prefetch buffer."""
    try:
        return _pipeline(dataset)
    except (AttributeError, NotImplementedError, TypeError, ValueError) as exc:    # a dataset class of its own
        return dict.fromkeys(("loader.workers", "loader.prefetch", "loader.pin_memory"), settings_lib.not_reported(
            f"the tf.data pipeline's stages could not be read ({type(exc).__name__})"))


def _pipeline(dataset) -> dict:
    stages, workers, prefetch, d = [], 0, None, dataset
    while d is not None:
        name = type(d).__name__.strip("_").replace("Dataset", "")
        calls = getattr(d, "_num_parallel_calls", None)          # a parallel map, interleave or batch
        size = getattr(d, "_buffer_size", None) if "Prefetch" in name else None
        if calls is not None:
            workers = -1 if -1 in (workers, int(calls)) else max(workers, int(calls))
        if size is not None and prefetch is None:
            prefetch = int(size)
        stages.append(name + (f"({int(calls if calls is not None else size)})" if calls is not None or size is not None
                              else ""))
        inputs = d._inputs()
        d = inputs[0] if inputs else None
    chain = f"the tf.data pipeline's stages: {' <- '.join(stages)}"
    inject = dataset.options().experimental_optimization.inject_prefetch
    return {"loader.workers": settings_lib.read("autotune" if workers == -1 else workers, chain),
            "loader.prefetch": settings_lib.read("autotune" if prefetch == -1 else prefetch or 0,
                                                 f"{chain} (tf.data's inject_prefetch option {inject!r})"),
            "loader.pin_memory": NO_PINNING}
