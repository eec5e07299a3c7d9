"""The named mistakes the seed posts made: each one a switch a kit can turn on alone.

A variant of an experiment is a list of these names. The fixed run has none.
Detectors never read this list: they judge from what they observe at run time.

Each pitfall names the part of a run it changes. The equivalence certificate
exercises the model, the training step and the on-device preprocessing, so
pitfalls of those parts change what it certifies; the others (the input
pipeline, evaluation, metrics, the schedule) it cannot see.
"""
from __future__ import annotations

PITFALLS: dict[str, dict] = {
    # Seed 000 (speed), TensorFlow side.
    "tf_batch_of_one": {
        "part": "pipeline",
        "framework": "tensorflow",
        "summary": "each example mapped to a batch of one (expand_dims); steps_per_epoch hides it",
    },
    "tf_shuffle_ignored": {
        "part": "pipeline",
        "framework": "tensorflow",
        "summary": "model.fit(shuffle=True) is ignored for a tf.data dataset: no shuffling",
    },
    "tf_epochs_resume": {
        "part": "pipeline",
        "framework": "tensorflow",
        "summary": "non-repeating dataset with steps_per_epoch: each epoch resumes where the last stopped",
    },
    "tf_inputs_0_255": {
        "part": "preprocessing",
        "framework": "tensorflow",
        "summary": "tf.image.resize returns floats in [0, 255]; the inputs are never scaled",
    },
    "tf_validation_single_examples": {
        "part": "evaluation",
        "framework": "tensorflow",
        "summary": "validation over len(test) steps of single examples",
    },
    # Seed 000 (speed), PyTorch side.
    "pt_head_1000": {
        "part": "model",
        "framework": "pytorch",
        "summary": "vgg16(pretrained=False) keeps its 1000-class head for a 10-class problem",
    },
    "pt_cpu_resize_dataloader": {
        "part": "pipeline",
        "framework": "pytorch",
        "summary": "Resize((224, 224)) on the CPU per image in a single-process DataLoader",
    },
    "pt_metrics_per_batch": {
        "part": "metrics",
        "framework": "pytorch",
        "summary": "summed loss and correct count divided by the number of batches, not samples",
    },
    # Seed 004 (memory), PyTorch side.
    "pt_running_acc_tensor": {
        "part": "metrics",
        "framework": "pytorch",
        "summary": "total_train_acc += acc keeps the running accuracy as a device tensor",
    },
    "pt_val_grad": {
        "part": "evaluation",
        "framework": "pytorch",
        "summary": "validation without torch.no_grad()",
    },
    "pt_eval_once": {
        "part": "step",
        "framework": "pytorch",
        "summary": "model.eval() called once before training: Dropout off, BatchNorm on running statistics",
    },
    "pt_softmax_before_ce": {
        "part": "model",
        "framework": "pytorch",
        "summary": "F.softmax on the output, then CrossEntropyLoss (which expects logits)",
    },
    "pt_relu_logits": {
        "part": "model",
        "framework": "pytorch",
        "summary": "F.relu on the final linear layer's output",
    },
    "pt_shared_batchnorm": {
        "part": "model",
        "framework": "pytorch",
        "summary": "one BatchNorm module reused for several layers of the same width",
    },
    "pt_dropout2d": {
        "part": "model",
        "framework": "pytorch",
        "summary": "Dropout2d (whole channels) where the Keras model drops elements",
    },
    "pt_plateau_on_sum": {
        "part": "schedule",
        "framework": "pytorch",
        "summary": "ReduceLROnPlateau(patience=3, factor=0.9817) stepped on the summed epoch loss",
    },
    # Planted for the detectors' tests; no seed post has it.
    "pt_loss_sum_tensor": {
        "part": "metrics",
        "framework": "pytorch",
        "summary": "planted: running_loss += loss (no .item()), which keeps every step's graph alive",
    },
    "pt_slow_input": {
        "part": "pipeline",
        "framework": "pytorch",
        "summary": "planted: an input source that takes 50 ms per batch (a slow disk or decoder)",
    },
    # Seed 004 (memory), TensorFlow side.
    "tf_posted_model": {
        "part": "model",
        "framework": "tensorflow",
        "summary": "the posted Keras model: an extra Dense(10, relu) and softmax into categorical cross-entropy",
    },
}


CERTIFIED_PARTS = frozenset({"model", "step", "preprocessing"})


def certified(names: list[str]) -> list[str]:
    """The pitfalls among names that change what the equivalence certificate checks."""
    return [n for n in names if PITFALLS[n]["part"] in CERTIFIED_PARTS]


def for_framework(names: list[str], framework: str) -> list[str]:
    return [n for n in names if PITFALLS[n]["framework"] == framework]
