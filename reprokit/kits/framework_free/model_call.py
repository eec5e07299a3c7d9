"""The call a script made of its model at its first training step, recorded so that the certificate replays it.

A script calls its model as its framework allows: ``model(x)``, ``model(x, rngs)`` (a Flax NNX model that
draws its dropout from the Rngs it is given), ``model(x, training=True)``, ``model(input=x, mask=m)``. Each
probe records that call with its arguments' roles (``Argument``), and the certificate calls the captured
model the same way, the certificate's batch in place of the script's:

- ``batch``: the first array of the call (positional, then keyword; one level into a tuple, list or dict),
  replaced by the certificate's input;
- ``array``: any other array, replayed as the script's own values, cut to the certificate's samples where its
  leading dimension is the batch's;
- ``rng``: a random-number object (a Flax ``Rngs``, a PRNG key, a ``torch.Generator``), replayed by value;
- ``value``: a flag or number (``training=True``, ``deterministic=False``), replayed as given;
- ``object``: anything else the call passed (a config object), replayed as the same object.

A function, a generator or an iterator cannot be replayed (it closes over the script's state, or is used up):
``Unreplayable`` names it in one sentence. A model may return a tuple, a dict or a dataclass: ``part`` is the
path to the output that the script's loss read, which the certificate compares, and says so.
Standard library only: each probe gives the framework's own idea of an array and of a random-number object.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

BATCH, ARRAY, RNG, VALUE, OBJECT = "batch", "array", "rng", "value", "object"
Path = tuple[tuple[str, Any], ...]          # ("index", 0), ("key", "logits"), ("attr", "logits")
_PLAIN = (type(None), bool, int, float, complex, str, bytes, enum.Enum)


class Unreplayable(ValueError):
    """The script's model call has an argument the certificate cannot call it with again (one sentence)."""


@dataclasses.dataclass
class Argument:
    name: str           # the parameter's name in the model's signature, or "argument N"
    role: str
    text: str           # how the certificate names it
    value: Any = None   # what the replay passes (the batch's place is taken by the certificate's input)
    rows: int | None = None     # an array's leading dimension, where it is the batch's: cut to the samples


@dataclasses.dataclass
class ModelCall:
    """The model's call at the script's first step: its arguments, where its batch is, what the loss read."""
    model: str
    args: list[Argument]
    kwargs: dict[str, Argument]
    batch_at: Path              # where the batch is: ("index", i) or ("key", name), then one level inside
    part: Path = ()             # the output's part the script's loss read
    part_why: str = "the model returns one array"

    def replay(self, call: Callable[..., Any], x: Any) -> Any:
        """``call(*args, **kwargs)`` as the script called its model, ``x`` in the batch's place and the batch's
        companions cut to x's samples; the output's compared part."""
        n = len(x)
        args = [_value(a, n) for a in self.args]
        kwargs = {k: _value(a, n) for k, a in self.kwargs.items()}
        holder: Any = args if self.batch_at[0][0] == "index" else kwargs
        _put(holder, self.batch_at, x)
        return pick(call(*args, **kwargs), self.part)

    def plain(self) -> bool:
        """Called with its batch alone and compared whole: a replay changes nothing."""
        return len(self.args) + len(self.kwargs) == 1 and len(self.batch_at) == 1 and not self.part

    def describe(self) -> dict[str, Any]:
        """For the certificate's JSON and report: the call as text, each argument's role, the compared part."""
        shown = [a.name if a.role == BATCH else f"{a.name}={a.text}" if not a.name.startswith("argument") else a.text
                 for a in self.args]
        shown += [f"{k}={'x' if a.role == BATCH else a.text}" for k, a in self.kwargs.items()]
        return {"call": f"{self.model}({', '.join(shown)})",
                "arguments": [{"name": a.name, "role": a.role, "text": a.text}
                              for a in [*self.args, *self.kwargs.values()]],
                "compared": path_text(self.part), "compared_why": self.part_why}


def _value(a: Argument, n: int) -> Any:
    if a.role == ARRAY and a.rows is not None:
        return a.value[:n]
    if isinstance(a.value, (list, dict)) and a.role == BATCH:     # the batch inside a container: a copy to fill
        return type(a.value)(a.value)
    return a.value


def _put(holder: Any, at: Path, x: Any) -> None:
    """Put x where the batch was (at most one level inside a container, copied: the script's own is kept)."""
    (_, first), inner = at[0], at[1:]
    if not inner:
        holder[first] = x
        return
    container = holder[first]
    if isinstance(container, tuple):
        items = list(container)
        items[inner[0][1]] = x
        holder[first] = type(container)(*items) if hasattr(container, "_fields") else tuple(items)
    else:
        container[inner[0][1]] = x


def record(model: str, signature_of: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any],
           is_array: Callable[[Any], bool], rng_text: Callable[[Any], str | None],
           shape_text: Callable[[Any], str]) -> ModelCall:
    """The model's call, each argument given its role; ``Unreplayable`` for one that cannot be replayed.
    ``signature_of`` is the function the call reaches (forward, call, __call__), for the arguments' names."""
    names = _parameter_names(signature_of, len(args))
    batch_at = _find_batch(args, kwargs, is_array)
    if batch_at is None:
        raise Unreplayable(f"the script calls its {model} with no array among its arguments "
                           f"({', '.join(names[:len(args)] + list(kwargs)) or 'none'}): the certificate has no batch "
                           f"to put its input in")
    holder = args if batch_at[0][0] == "index" else kwargs
    batch = holder[batch_at[0][1]]
    for step in batch_at[1:]:
        batch = batch[step[1]]
    rows = int(getattr(batch, "shape", (0,))[0]) if getattr(batch, "shape", ()) else None

    def role(name: str, value: Any, at: Path) -> Argument:
        if at[:1] == batch_at[:1]:
            return Argument(name, BATCH, f"its batch, {shape_text(batch)}" if len(batch_at) == 1 else
                            f"a container holding its batch at {path_text(batch_at[1:])}", value)
        if is_array(value):
            lead = int(value.shape[0]) if getattr(value, "shape", ()) else None
            same = lead is not None and lead == rows
            return Argument(name, ARRAY, f"{shape_text(value)} (the script's own"
                                         f"{', cut to the certificate samples' if same else ''})", value,
                            lead if same else None)
        rng = rng_text(value)
        if rng is not None:
            return Argument(name, RNG, f"{rng} (the script's, by value)", value)
        if isinstance(value, _PLAIN) or (isinstance(value, (tuple, frozenset)) and all(
                isinstance(v, _PLAIN) for v in value)):
            return Argument(name, VALUE, repr(value), value)
        why = _unreplayable(value)
        if why:
            raise Unreplayable(f"the script calls its {model} with {name} = {why}, which the certificate cannot "
                               f"call it with again (it replays arrays, random-number objects, flags and plain "
                               f"objects): give the model that value as a setting, or certify a script that calls "
                               f"it with its batch alone")
        return Argument(name, OBJECT, f"the script's {type(value).__name__} object", value)
    return ModelCall(model, [role(names[i], a, (("index", i),)) for i, a in enumerate(args)],
                     {k: role(k, v, (("key", k),)) for k, v in kwargs.items()}, batch_at)


def _unreplayable(value: Any) -> str | None:
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
        return "a generator"
    if isinstance(value, (types.FunctionType, types.LambdaType, types.MethodType, types.BuiltinFunctionType)):
        return f"the function {getattr(value, '__qualname__', repr(value))}"
    if isinstance(value, Iterator):
        return f"an iterator ({type(value).__name__})"
    return None


def _parameter_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The names the model's signature gives its first n positional arguments ("argument k" past them)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i].name if i < len(params) else f"argument {i + 1}" for i in range(n)]


def _find_batch(args: tuple[Any, ...], kwargs: Mapping[str, Any], is_array: Callable[[Any], bool]) -> Path | None:
    """Where the call's first array is: an argument, or one level inside a tuple, list or dict argument."""
    places: list[tuple[tuple[str, Any], Any]] = [(("index", i), a) for i, a in enumerate(args)]
    places += [(("key", k), v) for k, v in kwargs.items()]
    for at, value in places:
        if is_array(value):
            return (at,)
    for at, value in places:
        for inner, leaf in _children(value):
            if is_array(leaf):
                return (at, inner)
    return None


def _children(value: Any) -> list[tuple[tuple[str, Any], Any]]:
    if isinstance(value, (tuple, list)):
        return [(("index", i), v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(("key", k), v) for k, v in value.items()]
    return []


# -- the output's parts ------------------------------------------------------------------------------------

def leaves(output: Any, is_array: Callable[[Any], bool], depth: int = 3) -> Iterator[tuple[Path, Any]]:
    """(path, array) of each array in a model's output: a tuple, list, mapping or dataclass, three levels down."""
    if is_array(output):
        yield (), output
        return
    if depth == 0:
        return
    if isinstance(output, Mapping):
        children: list[tuple[tuple[str, Any], Any]] = [(("key", k), v) for k, v in output.items()]
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        children = [(("attr", f.name), getattr(output, f.name, None)) for f in dataclasses.fields(output)]
    elif isinstance(output, (tuple, list)):
        children = [(("index", i), v) for i, v in enumerate(output)]
    else:
        return
    for step, child in children:
        for path, leaf in leaves(child, is_array, depth - 1):
            yield (step, *path), leaf


def pick(output: Any, path: Path) -> Any:
    for kind, key in path:
        output = getattr(output, key) if kind == "attr" else output[key]
    return output


def path_text(path: Path) -> str:
    """``output``, ``output[0]``, ``output['logits']``, ``output.logits``."""
    return "output" + "".join(f".{k}" if kind == "attr" else f"[{k!r}]" for kind, k in path)


def choose_part(output: Any, is_array: Callable[[Any], bool], read: Callable[[Any], bool] | None,
                batch_rows: int | None) -> tuple[Path, str]:
    """The part of the output the certificate compares, and why: the one the script's loss read (``read``
    tells a leaf the loss took), else the only array, else the first (batch, k) array, declared as a guess."""
    found = list(leaves(output, is_array))
    if len(found) == 1 and not found[0][0]:
        return (), "the model returns one array"
    if read is not None:
        for path, leaf in found:
            if read(leaf):
                return path, "the part the script's loss read"
    if len(found) == 1:
        return found[0][0], "the only array the model returns"
    shaped = [p for p, leaf in found if len(getattr(leaf, "shape", ())) == 2 and
              (batch_rows is None or int(leaf.shape[0]) == batch_rows)]
    if shaped:
        return shaped[0], ("the first (batch, k) array the model returns: the probe did not see which part the "
                           "script's loss read")
    if found:
        return found[0][0], "the first array the model returns: the probe did not see which part its loss read"
    raise Unreplayable("the script's model returns no array the certificate can compare")


def as_shape(x: Any, shape: tuple[int, ...]) -> Any:
    """The reference side's canonical batch ``x`` (NHWC images, or as its model took it) as a model whose samples
    have ``shape`` takes it, or None where it cannot: the same shape, or the same values in the same order once
    dimensions of one are dropped or added ((28, 28, 1) for a model of input (28, 28) or (1, 28, 28)), or
    flattened where the images have one channel ((28, 28, 1) for (784,)). Channels are never moved: a model that
    takes another layout runs on its own input, and the certificate says so."""
    per_sample = tuple(int(d) for d in x.shape[1:])
    if per_sample == tuple(shape):
        return x
    squeezed = tuple(d for d in per_sample if d != 1)
    target = tuple(d for d in shape if d != 1)
    one_channel = len(per_sample) < 3 or per_sample[-1] == 1
    size = 1
    for d in shape:
        size *= d
    if squeezed == target or (one_channel and size == x[0].size):
        return x.reshape((len(x), *shape))
    return None
