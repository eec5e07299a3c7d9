"""The data a probed script finds where its API looks: the named datasets, each in its own file format.

The spec's data (reprokit/kits/contract/spec.py ScriptData) is the dataset the plan found the script's folder loading
(reprokit/plan/script_datasets.py), checked against the sha256 the spec names: the published one on standard
and full, its generated stand-in on quick. A script that loads another of the datasets the kit knows gets
that one too: on quick its stand-in, generated here from the same code and seed the host uses; on standard
the host's prepared copy, checked against the checksum the host recorded. Files are written when the script
first asks for them, under the run's work folder, and each dataset is declared once in the probe's shims.
Standard library and numpy only: each library's data layer (reprokit/kits/served_data/) serves its API from here.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from reprokit.kits.contract.named_datasets import CIFAR_FOLDERS, KNOWN, Named, of_dataset
from reprokit.kits.contract.published_urls import PublishedFile
from reprokit.kits.contract.spec import ScriptData
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free import dataset_formats as formats
from reprokit.kits.framework_free import stand_ins

STAND_IN_SEED = 0           # the plan's seed of a script's stand-in (reprokit/plan/script_plan.py)
_SHA256SUM = re.compile(r"([0-9a-f]{64})  ")


class NotProvided(Exception):
    """A dataset or file the run cannot serve, raised where the script asks for it (not an OSError or a
    RuntimeError, which the frameworks' download loops catch and retry)."""


T = TypeVar("T")


def _one_at_a_time(method: Callable[..., T]) -> Callable[..., T]:
    """A staging method under the run's staging lock: the processes of one run (its ranks) ask for the same files
    at once, and one process's half-written folder must not look staged to another. Held once per process (a
    staging method that calls another holds it already)."""
    @functools.wraps(method)
    def staged(self: StagedData, *args: Any, **kwargs: Any) -> T:
        if self._holding:
            return method(self, *args, **kwargs)
        with (self.staged / ".staging.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._holding = True
            try:
                return method(self, *args, **kwargs)
            finally:
                self._holding = False
    return staged


class StagedData:
    """The named datasets of one run, served on demand; ``declared`` is the probe's list of shims."""

    def __init__(self, d: ScriptData, data_dir: Path, work: Path, declared: list[str]) -> None:
        self.data_dir, self.staged, self.declared = data_dir, work / ".reprokit-data", declared
        self.counts = (d.train_samples, d.test_samples)
        # a spec's synthetic data (or an older spec's) stands in for CIFAR-10, as it always did
        self.planned: Named = of_dataset(d.dataset) or KNOWN["cifar10"]
        self.stand_in = d.dataset not in KNOWN
        if d.file is None or d.sha256 is None:
            raise datalib.DataError(f"the spec names no prepared {d.dataset} (it was planned before the data step): "
                                    f"prepare the data and plan the run again")
        self._arrays = {self.planned.name: datalib.load(data_dir / d.file, d.sha256, *self.counts)}
        self._said: set[str] = set()
        self._checked: set[Path] = set()
        self._aside: dict[Path, Path | None] = {}      # a file served outside the run's folders: what was there
        self._holding = False                          # this process holds the staging lock
        self.staged.mkdir(parents=True, exist_ok=True)

    @property
    def classes(self) -> int:
        planned = self._arrays[self.planned.name]
        return int(max(planned.y_train.max(), planned.y_test.max())) + 1

    def arrays(self, name: str) -> datalib.Arrays:
        """The named dataset's arrays: the spec's, checked; another's stand-in, generated; another's prepared copy."""
        if name not in self._arrays:
            self._arrays[name] = self._generated(name) if self.stand_in else self._prepared(name)
        return self._arrays[name]

    def _generated(self, name: str) -> datalib.Arrays:
        x_train, y_train, x_test, y_test = stand_ins.generate(name, *self.counts, STAND_IN_SEED)
        return datalib.Arrays(x_train, y_train, x_test, y_test, sha256="generated in the run")

    def _prepared(self, name: str) -> datalib.Arrays:
        path, title = self.data_dir / f"{name}.npz", KNOWN[name].title
        sidecar = path.with_name(path.name + ".sha256")
        recorded = _SHA256SUM.match(sidecar.read_text()) if sidecar.is_file() else None
        if not path.is_file() or not recorded:
            raise NotProvided(f"the script loads {title}, which is not prepared in {self.data_dir}: stage it with "
                              f"`nox -s data -- {name}` and run again")
        return datalib.load(path, recorded[1], None, None)

    def _declare(self, name: str, how: str) -> None:
        """One sentence per dataset served: a stand-in says so, the verified data says how it was written."""
        if name in self._said:
            return
        self._said.add(name)
        title, (n_train, n_test) = KNOWN[name].title, (len(self.arrays(name).y_train), len(self.arrays(name).y_test))
        self.declared.append(
            f"the generated {title} stand-in ({n_train} training, {n_test} test images) in {title}'s file format, "
            f"not {title}" if self.stand_in else f"{title} ({n_train} training, {n_test} test images) {how}")

    def written(self, path: str | Path) -> bool:
        """Whether a file is one this run wrote (a stand-in's, whose published checksums cannot match)."""
        return Path(path).resolve().is_relative_to(self.staged.resolve())

    # -- where each API looks ----------------------------------------------------------------------

    @_one_at_a_time
    def cifar(self, name: str) -> Path:
        """The CIFAR dataset's python-version folder: the host's extracted published files, linked, or the arrays
        written in their format (a stand-in, or CIFAR-10's verified arrays where the host kept no files)."""
        folder = self.staged / CIFAR_FOLDERS[name]
        originals = self.data_dir / CIFAR_FOLDERS[name]
        if folder.exists():
            return folder
        if not self.stand_in and originals.is_dir():
            folder.symlink_to(originals.resolve())
            return folder
        if name == "cifar100" and not self.stand_in:      # its coarse labels live in the published files alone
            raise NotProvided(f"the script loads CIFAR-100, whose published files are not in {self.data_dir}: stage "
                              f"them with `nox -s data -- cifar100` and run again")
        write = datalib.write_cifar10_batches if name == "cifar10" else formats.write_cifar100
        write(self.arrays(name), self.staged)
        self._declare(name, f"from the verified arrays, written in {KNOWN[name].title}'s file format")
        return folder

    @_one_at_a_time
    def torchvision_root(self, name: str, folder: str) -> Path:
        """A root for torchvision's class of the dataset, whose ``folder`` (its class name for MNIST's kind, its
        base_folder for CIFAR's) holds the dataset's files as the class reads them."""
        root = self.staged / "torchvision" / name
        target = root / folder
        if not target.exists():
            root.mkdir(parents=True, exist_ok=True)
            if name in CIFAR_FOLDERS:
                target.symlink_to(self.cifar(name).resolve())
            else:
                formats.write_idx(self.arrays(name), target / "raw")
                self._declare(name, f"from the verified arrays, written in {KNOWN[name].title}'s idx files")
        return root

    @_one_at_a_time
    def keras_file(self, name: str) -> Path:
        """What Keras's load_data gets from get_file: MNIST's mnist.npz, Fashion-MNIST's folder of gzipped idx
        files, the folder that holds cifar-100-python."""
        if name in CIFAR_FOLDERS:
            return self.cifar(name).parent
        target = self.staged / "keras" / ("mnist.npz" if name == "mnist" else "fashion-mnist")
        if not target.exists():
            write = formats.write_keras_mnist if name == "mnist" else formats.write_idx_gz
            write(self.arrays(name), target)
            self._declare(name, f"from the verified arrays, written in Keras's {KNOWN[name].title} file format")
        return target

    @_one_at_a_time
    def published(self, file: PublishedFile) -> Path:
        """A listed published file (reprokit/kits/contract/published_urls.py) as its URL gives it: the host's staged
        copy, checked against the published checksum, or else the dataset written in the file's format by the run (its
        stand-in, or the verified arrays where the host kept no such file)."""
        named, target = KNOWN[file.dataset], self.staged / "published" / file.dataset / file.name
        staged = self.data_dir / (file.name if file.dataset in CIFAR_FOLDERS
                                  else f"{named.torchvision}/raw/{file.name}")     # where the host stages them
        if not self.stand_in and staged.is_file():
            return self._checked_file(staged, file)
        if not target.exists():
            if file.name.endswith(".tar.gz"):
                formats.write_cifar_tarball(self.cifar(file.dataset), target)
            elif file.name == "mnist.npz":
                formats.write_keras_mnist(self.arrays(file.dataset), target)
            else:                                     # the four idx files at once
                formats.write_idx_gz(self.arrays(file.dataset), target.parent)
            what = "gz idx files" if file.name.endswith("-ubyte.gz") else file.name
            self._declare(file.dataset, f"from the verified arrays, written as {named.title}'s published {what}")
        return target

    def _checked_file(self, path: Path, file: PublishedFile) -> Path:
        """A staged published file whose bytes have the published checksum; refused, naming it, where they do not."""
        if path not in self._checked:
            algorithm, expected = next(iter(file.checksums().items()))
            with path.open("rb") as f:
                actual = hashlib.file_digest(f, algorithm).hexdigest()
            if actual != expected:
                named = KNOWN[file.dataset]
                raise NotProvided(f"{path} is not the published {file.name} of {named.title} (its {algorithm} is "
                                  f"{actual}, the published one {expected}): delete it and stage {named.title} again "
                                  f"with `nox -s data -- {named.name}`")
            self._checked.add(path)
        return path

    # -- files served outside the run's folders ----------------------------------------------------

    def outside(self, path: str | Path) -> bool:
        """Whether a path is outside the run's work folder and its temporary folder (``/tmp/jax_example_data``)."""
        where = Path(path).resolve()
        return not any(where.is_relative_to(Path(own).resolve()) for own in (self.staged.parent, tempfile.gettempdir()))

    def set_aside(self, path: str | Path) -> None:
        """Before a served file is written outside the run's folders: what is there is moved aside, to be put back
        when the script ends (put_back), so no run's file outlives it where a later run would read it."""
        where = Path(path).resolve()
        if where in self._aside:
            return
        kept = where.with_name(f".{where.name}.reprokit-aside")
        self._aside[where] = where.rename(kept) if where.exists() else None

    def put_back(self) -> None:
        """The files served outside the run's folders removed, and what was there before put back."""
        for where, kept in self._aside.items():
            where.unlink(missing_ok=True)
            if kept is not None:
                kept.rename(where)
        self._aside.clear()


def replace_everywhere(prefix: str, original: object, replacement: object) -> None:
    """Rebind every loaded module's name for ``original`` under the package ``prefix`` (modules that imported the
    function by name keep their own reference to it)."""
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == prefix or module_name.startswith(prefix + ".")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)
