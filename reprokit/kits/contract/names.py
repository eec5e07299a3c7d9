"""Names both sides share: the framework registry, and the built-in models' layouts.

Dependency-free, so the kits (standard library, numpy and one framework) and the
host import the same definitions.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from reprokit.kits.contract import plugins

# The modules a framework's kit may have: ``backend`` (the training run), ``certify`` (its side of the
# certificate), ``probe`` (a user's script under observation) and ``bare`` (the bench's bare loop). What the
# kit's entry points ask of each, and the one lookup of each: reprokit/kits/parts.py.
PARTS = ("backend", "certify", "probe", "bare")
TFDS_DATA = "tfds_data"        # a part one kit may add: it builds TFDS's cifar10 with TFDS's own code


@dataclass(frozen=True)
class Framework:
    """One framework's entry. Its kit package holds the modules ``parts`` names (of PARTS); its lock files are
    ``locks/<name>*.txt`` (named in ``docker/bases.toml``), its image ``docker/<name>.Dockerfile``. A kit without
    ``certify`` is still paired with the reference, and its certificate is recorded as not run, with why."""
    name: str
    label: str            # how people write it
    package: str          # its kit, e.g. reprokit.kits.pytorch_kit
    colour: str           # its bars in the report's plots (Okabe-Ito, which colour-blind readers tell apart)
    parts: tuple[str, ...] = PARTS

    def has(self, part: str) -> bool:
        return part in self.parts


# The frameworks this repository ships; the first is the reference every other one is compared against
# (a ratio is always the reference over another: PyTorch / TensorFlow).
BUILTIN = (
    Framework("pytorch", "PyTorch", "reprokit.kits.pytorch_kit", "#0072B2"),
    Framework("tensorflow", "TensorFlow", "reprokit.kits.tensorflow_kit", "#E69F00", parts=(*PARTS, TFDS_DATA)),
    Framework("jax", "JAX", "reprokit.kits.jax_kit", "#009E73"),
)
# Frameworks other packages register (the ``reprokit.frameworks`` entry-point group, reprokit/kits/contract/plugins.py),
# after the built-in ones; each plugin that fails to load is one sentence in BROKEN, and the others still work.
EXTRA, PLUGINS, BROKEN = plugins.load(plugins.listed(), Framework, {b.name for b in BUILTIN})
REGISTRY = {fw.name: fw for fw in (*BUILTIN, *EXTRA)}
FRAMEWORKS = tuple(REGISTRY)
LABELS = {name: fw.label for name, fw in REGISTRY.items()}
REFERENCE = FRAMEWORKS[0]
# A kit prints progress as this marker and one JSON object per line; runners route those lines.
PROGRESS_MARKER = "REPROKIT-PROGRESS "
# Every container and image the kit makes carries this label (=1), so leftovers can be found.
CONTAINER_LABEL = "reprokit"

# Conv widths per block before width_multiplier: VGG16 configuration D, and the seed 004 SimpleCNN.
VGG16_BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]
SIMPLECNN_BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512], [512]]


def plugin_environment(where: Callable[[str], str] = str) -> dict[str, str]:
    """The environment a kit process needs to load the plugins' frameworks, none included (``where``: a plugin's
    folder as the process sees it)."""
    return plugins.environment(PLUGINS, where)


def label(framework: str) -> str:
    return LABELS.get(framework, framework)


def others(present: Iterable[str] = ()) -> tuple[str, ...]:
    """The frameworks held against the reference, of those ``present``, in the registry's order; where none of
    them is, the registry's second, so that a table of the reference alone still names what it lacks."""
    found = set(present)
    return tuple(fw for fw in FRAMEWORKS[1:] if fw in found) or FRAMEWORKS[1:2]


def compared(present: Iterable[str] = ()) -> tuple[str, ...]:
    """A table's frameworks: the reference first, then ``others(present)``."""
    return (REFERENCE, *others(present))


def joined(words: Iterable[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    items = list(words)
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def ratios(present: Iterable[str] = ()) -> str:
    """The framework ratios of a table, in words: "PyTorch / TensorFlow" (with a third: "... and PyTorch / X")."""
    return joined(f"{label(REFERENCE)} / {label(fw)}" for fw in others(present))


# The $comment that marks a JSON schema's framework enum (reprokit/schemas/*.json).
FRAMEWORK_ENUM = ("the registry's frameworks: written from reprokit/kits/contract/names.py BUILTIN by "
                  "reprokit/claims/claims.py write_schema; extra entries are added at load time")


def schema_objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object of a JSON schema (or any JSON), each before those inside it: a caller may change what an
    object holds, and the walk then goes into what it holds by then."""
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from schema_objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from schema_objects(value)


def fill_frameworks(schema: Any, names: Iterable[str]) -> Any:
    """``schema`` (a JSON schema, or any part of one) with every framework enum (marked by FRAMEWORK_ENUM) set to
    ``names``, in place."""
    for obj in schema_objects(schema):
        if obj.get("$comment") == FRAMEWORK_ENUM:
            obj["enum"] = list(names)
    return schema


def schema_with_registry(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema as the kit validates with it: its framework enums the registry's names, extra entries
    included. The committed schemas list the built-in ones (tests/test_registry.py fails where they drift)."""
    filled: dict[str, Any] = fill_frameworks(schema, FRAMEWORKS)
    return filled


def kit_module(framework: str, part: str) -> str:
    """The module of a framework's kit that does ``part`` (backend, certify, probe, bare, tfds_data)."""
    return f"{REGISTRY[framework].package}.{part}"


def scaled_width(channels: int, multiplier: float) -> int:
    """A layer's width at the profile's width_multiplier (at least one channel)."""
    return max(1, int(round(channels * multiplier)))
