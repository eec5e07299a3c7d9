"""The named mistakes the seed posts made: each one a switch a kit can turn on alone.

A variant of an experiment is a list of these names. The fixed run has none.
Detectors never read this list: they judge from what they observe at run time.

Each pitfall names the part of a run it changes. The equivalence certificate
exercises the model, the training step and the on-device preprocessing, so
pitfalls of those parts change what it certifies; the others (the input
pipeline, evaluation, metrics, the schedule, what the loop keeps alive) it
cannot see.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


class Pitfall(enum.StrEnum):
    """One named mistake; equal to its name, so specs and result files carry plain strings."""

    TF_BATCH_OF_ONE = "tf_batch_of_one"
    TF_SHUFFLE_IGNORED = "tf_shuffle_ignored"
    TF_EPOCHS_RESUME = "tf_epochs_resume"
    TF_INPUTS_0_255 = "tf_inputs_0_255"
    TF_VALIDATION_SINGLE_EXAMPLES = "tf_validation_single_examples"
    PT_HEAD_1000 = "pt_head_1000"
    PT_CPU_RESIZE_DATALOADER = "pt_cpu_resize_dataloader"
    PT_METRICS_PER_BATCH = "pt_metrics_per_batch"
    PT_RUNNING_ACC_TENSOR = "pt_running_acc_tensor"
    PT_VAL_GRAD = "pt_val_grad"
    PT_EVAL_ONCE = "pt_eval_once"
    PT_SOFTMAX_BEFORE_CE = "pt_softmax_before_ce"
    PT_RELU_LOGITS = "pt_relu_logits"
    PT_SHARED_BATCHNORM = "pt_shared_batchnorm"
    PT_DROPOUT2D = "pt_dropout2d"
    PT_PLATEAU_ON_SUM = "pt_plateau_on_sum"
    TF_POSTED_MODEL = "tf_posted_model"
    TF_POSTED_VGG16 = "tf_posted_vgg16"
    TF_KERAS_APPLICATIONS_RESNET50 = "tf_keras_applications_resnet50"
    PT_ITEM_PER_STEP = "pt_item_per_step"
    PT_BLOCKING_COPY = "pt_blocking_copy"
    PT_OUTPUTS_KEPT_ALIVE = "pt_outputs_kept_alive"
    PT_EMPTY_CACHE_BEFORE_EVAL = "pt_empty_cache_before_eval"

    @property
    def framework(self) -> str:
        return PITFALLS[self]["framework"]

    @property
    def part(self) -> str:
        return PITFALLS[self]["part"]

    @property
    def summary(self) -> str:
        return PITFALLS[self]["summary"]


PITFALLS: dict[str, dict[str, str]] = {
    # Seed 000 (speed), TensorFlow side.
    Pitfall.TF_BATCH_OF_ONE: {
        "part": "pipeline",
        "framework": "tensorflow",
        "summary": "each example mapped to a batch of one (expand_dims); steps_per_epoch hides it",
    },
    Pitfall.TF_SHUFFLE_IGNORED: {
        "part": "pipeline",
        "framework": "tensorflow",
        "summary": "model.fit(shuffle=True) is ignored for a tf.data dataset: no shuffling",
    },
    Pitfall.TF_EPOCHS_RESUME: {
        "part": "pipeline",
        "framework": "tensorflow",
        "summary": "non-repeating dataset with steps_per_epoch: each epoch resumes where the last stopped",
    },
    Pitfall.TF_INPUTS_0_255: {
        "part": "preprocessing",
        "framework": "tensorflow",
        "summary": "tf.image.resize returns floats in [0, 255]; the inputs are never scaled",
    },
    Pitfall.TF_VALIDATION_SINGLE_EXAMPLES: {
        "part": "evaluation",
        "framework": "tensorflow",
        "summary": "validation over len(test) steps of single examples",
    },
    # Seed 000 (speed), PyTorch side.
    Pitfall.PT_HEAD_1000: {
        "part": "model",
        "framework": "pytorch",
        "summary": "vgg16(pretrained=False) keeps its 1000-class head for a 10-class problem",
    },
    Pitfall.PT_CPU_RESIZE_DATALOADER: {
        "part": "pipeline",
        "framework": "pytorch",
        "summary": "Resize((224, 224)) on the CPU per image in a single-process DataLoader",
    },
    Pitfall.PT_METRICS_PER_BATCH: {
        "part": "metrics",
        "framework": "pytorch",
        "summary": "summed loss and correct count divided by the number of batches, not samples",
    },
    # Seed 004 (memory), PyTorch side.
    Pitfall.PT_RUNNING_ACC_TENSOR: {
        "part": "metrics",
        "framework": "pytorch",
        "summary": "total_train_acc += acc keeps the running accuracy as a device tensor",
    },
    Pitfall.PT_VAL_GRAD: {
        "part": "evaluation",
        "framework": "pytorch",
        "summary": "validation without torch.no_grad()",
    },
    Pitfall.PT_EVAL_ONCE: {
        "part": "step",
        "framework": "pytorch",
        "summary": "model.eval() called once before training: Dropout off, BatchNorm on running statistics",
    },
    Pitfall.PT_SOFTMAX_BEFORE_CE: {
        "part": "model",
        "framework": "pytorch",
        "summary": "F.softmax on the output, then CrossEntropyLoss (which expects logits)",
    },
    Pitfall.PT_RELU_LOGITS: {
        "part": "model",
        "framework": "pytorch",
        "summary": "F.relu on the final linear layer's output",
    },
    Pitfall.PT_SHARED_BATCHNORM: {
        "part": "model",
        "framework": "pytorch",
        "summary": "one BatchNorm module reused for several layers of the same width",
    },
    Pitfall.PT_DROPOUT2D: {
        "part": "model",
        "framework": "pytorch",
        "summary": "Dropout2d (whole channels) where the Keras model drops elements",
    },
    Pitfall.PT_PLATEAU_ON_SUM: {
        "part": "schedule",
        "framework": "pytorch",
        "summary": "ReduceLROnPlateau(patience=3, factor=0.9817) stepped on the summed epoch loss",
    },
    # Both PyTorch posts' loops.
    Pitfall.PT_ITEM_PER_STEP: {
        "part": "metrics",
        "framework": "pytorch",
        "summary": "running_loss += loss.item() every step: the host waits for the device at each step",
    },
    Pitfall.PT_BLOCKING_COPY: {
        "part": "pipeline",
        "framework": "pytorch",
        "summary": "inputs.to(device) and labels.to(device) without non_blocking: each copy blocks the host",
    },
    Pitfall.PT_OUTPUTS_KEPT_ALIVE: {
        "part": "loop",
        "framework": "pytorch",
        "summary": "the last outputs and loss stay referenced until the next step replaces them, in training and in "
                   "validation, and the last validation graph into the next epoch",
    },
    Pitfall.PT_EMPTY_CACHE_BEFORE_EVAL: {
        "part": "loop",
        "framework": "pytorch",
        "summary": "torch.cuda.empty_cache() after each epoch's training: the allocator's cached blocks go back to "
                   "the device before validation (nothing to do on a CPU)",
    },
    # Seed 004 (memory), TensorFlow side.
    Pitfall.TF_POSTED_MODEL: {
        "part": "model",
        "framework": "tensorflow",
        "summary": "the posted Keras model: an extra Dense(10, relu) and softmax into categorical cross-entropy",
    },
    # Seed 000 (speed), TensorFlow side, its model.
    Pitfall.TF_POSTED_VGG16: {
        "part": "model",
        "framework": "tensorflow",
        "summary": "keras.applications.vgg16.VGG16(weights=None, classes=10): no dropout, a softmax head, "
                   "Keras's default initializers",
    },
    # No post: the stock model people call in Keras, beside torchvision's (ResNet-50, seed 000's answer's evidence).
    Pitfall.TF_KERAS_APPLICATIONS_RESNET50: {
        "part": "model",
        "framework": "tensorflow",
        "summary": "keras.applications.ResNet50(weights=None): v1 (stride in the first 1x1 convolution), conv "
                   "biases, BatchNorm epsilon 1.001e-5 and momentum 0.99, Keras's default initializers, a softmax head",
    },
}


CERTIFIED_PARTS = frozenset({"model", "step", "preprocessing"})


@dataclass(frozen=True)
class Pitfalls:
    """The pitfalls a run reproduces, in the spec's order; a backend asks ``has(Pitfall.X)``."""

    members: tuple[Pitfall, ...] = ()

    @classmethod
    def of(cls, names: Iterable[str], where: str = "pitfalls") -> Pitfalls:
        unknown = [n for n in names if n not in PITFALLS]
        if unknown:
            raise ValueError(f"{where}: unknown pitfall(s) {', '.join(unknown)}; known: {', '.join(sorted(PITFALLS))}")
        return cls(tuple(Pitfall(n) for n in names))

    def has(self, pitfall: Pitfall) -> bool:
        return pitfall in self.members

    def names(self) -> list[str]:
        return [p.value for p in self.members]

    def __iter__(self) -> Iterator[Pitfall]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)


def certified(names: list[str]) -> list[str]:
    """The pitfalls among names that change what the equivalence certificate checks."""
    return [n for n in names if PITFALLS[n]["part"] in CERTIFIED_PARTS]


def for_framework(names: list[str], framework: str) -> list[str]:
    return [n for n in names if PITFALLS[n]["framework"] == framework]
