"""Which of the kit's named datasets a script loads, read from its folder's code when the run is planned.

The plan reads the script (first) and the other .py files a run copies with ast, for the datasets' API
names: ``datasets.MNIST(...)`` and ``from torchvision.datasets import FashionMNIST``, ``keras.datasets.mnist``,
``tf.keras.datasets.cifar100``, ``from tensorflow.keras.datasets import fashion_mnist``, TFDS's
``tfds.load('mnist', ...)`` or ``tfds.builder('cifar100')`` (a literal name; names in comments and in other
strings are not code, and do not count), and the URLs of the datasets' published files a script fetches itself
(reprokit/kits/contract/published_urls.py): a listed URL, or a mirror's folder, as JAX's examples join
``"https://storage.googleapis.com/cvdf-datasets/mnist/"`` to each file's name (a folder of two datasets' files
counts where the module names one of its files; a docstring's URL is prose). Read at plan time, the first one
found becomes the spec's data: the host prepares it (the published dataset, or its stand-in on quick) and
checksums it, so the report names the data the script trained on and the run id covers it; the plan refuses,
before any run, a standard run whose dataset is not there and cannot be downloaded. A script that loads another
of them as well (chosen by its arguments) still gets it in the run (reprokit/kits/training_loop/staged_data.py): the
plan prepares those too.
"""
from __future__ import annotations

import ast
from pathlib import Path

from reprokit.environments import notebooks
from reprokit.kits.contract import published_urls, work_folder
from reprokit.kits.contract.named_datasets import KNOWN

_TORCHVISION = {n.torchvision: n.name for n in KNOWN.values()}
_KERAS = {n.keras: n.name for n in KNOWN.values()}
_TFDS_MODULES = ("tfds", "tensorflow_datasets")      # as TFDS's guides import it, or by its own name


def _dotted_tail(node: ast.expr) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def _tfds_name(call: ast.Call) -> str | None:
    """The dataset of ``tfds.load('mnist:3.*.*', ...)`` or ``tfds.builder('mnist')``, a literal name TFDS shares."""
    func, args = call.func, call.args
    if not (isinstance(func, ast.Attribute) and func.attr in ("load", "builder")
            and _dotted_tail(func.value) in _TFDS_MODULES and args and isinstance(args[0], ast.Constant)
            and isinstance(args[0].value, str)):
        return None
    name = args[0].value.split(":")[0]
    return name if name in KNOWN else None


def _urls_in(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(line, column, dataset) of each published file's URL or mirror's folder in a module's strings (docstrings
    aside: prose is not a download)."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    strings = [(node, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant)
               and isinstance(node.value, str) and id(node) not in docs]
    names = {text for _, text in strings}
    found = []
    for node, text in strings:
        file, folder = published_urls.published(text), published_urls.folder_files(text)
        datasets = {file.dataset} if file else {f.dataset for f in folder}
        if len(datasets) > 1:        # Keras's mirror: the dataset of the file the module names
            datasets = {f.dataset for f in folder if f.name in names}
        found += [(node.lineno, node.col_offset, name) for name in sorted(datasets)]
    return found


def _named_in(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(line, column, dataset) of each use of a named dataset's API, or of its published files' URLs, in a module."""
    found = _urls_in(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            # torchvision's class names are distinctive; Keras's module names only after ``datasets.``
            name = _TORCHVISION.get(node.attr) or (_KERAS.get(node.attr) if _dotted_tail(node.value) == "datasets"
                                                   else None)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").rsplit(".", 1)[-1] == "datasets":
            name = next((_TORCHVISION.get(a.name) or _KERAS.get(a.name) for a in node.names
                         if a.name in _TORCHVISION or a.name in _KERAS), None)
        elif isinstance(node, ast.Call):
            name = _tfds_name(node)
        else:
            continue
        if name:
            found.append((node.lineno, node.col_offset, name))
    return sorted(found)


def loaded(folder: Path, script: str) -> list[str]:
    """The named datasets the script's folder loads, in the order they first appear (the script's own file first)."""
    others = sorted(p for here, names in work_folder.walk(folder) for p in (here / n for n in names)
                    if p.suffix == ".py" and p != folder / script)
    out: list[str] = []
    for path in [folder / script, *others]:
        try:
            tree = ast.parse(notebooks.source(path), filename=str(path))   # a notebook: its code cells
        except (SyntaxError, ValueError):        # not Python this interpreter reads: the run will say so
            continue
        out += [name for _, _, name in _named_in(tree)]
    return list(dict.fromkeys(out))


def planned(found: list[str], profile: str) -> str | None:
    """The spec's data.dataset for a script that loads these: the first one, published (its stand-in on quick);
    None where it loads none, or CIFAR-10 first (the profile's own data, as before)."""
    if not found or found[0] == "cifar10":
        return None
    return KNOWN[found[0]].stand_in if profile == "quick" else found[0]
