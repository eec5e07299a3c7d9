"""Experiment specs: read a TOML file, refuse bad input with one clear sentence, apply a profile."""
from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from reprokit import resources
from reprokit.claims.framework_schemas import fill_per_framework
from reprokit.errors import UserError
from reprokit.kits.contract.names import FRAMEWORKS, REGISTRY, label, schema_with_registry
from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.plan.request import ScriptCommand
from reprokit.plan.script_entries import command_entry, script_entry
from reprokit.results import safe_names
from reprokit.results.schema_messages import describe

PROFILES = ("quick", "standard", "full")
BUILTIN_DIR = resources.experiments()


@dataclass(frozen=True)
class Experiment:
    path: Path
    doc: dict[str, Any]          # the file as written, validated

    @property
    def name(self) -> str:
        name: str = self.doc["experiment"]["name"]
        return name

    @property
    def frameworks(self) -> list[str]:
        frameworks: list[str] = self.doc["experiment"]["frameworks"]
        return frameworks

    @property
    def device_counts(self) -> tuple[int, ...]:
        """The devices each of its runs trains on, a run per count (--devices overrides them): [1] by default."""
        return tuple(self.doc["experiment"].get("device_counts", [1]))

    @property
    def scaling(self) -> str:
        """What train.batch_size is at N devices: strong, the global batch at every count; weak, each device's."""
        scaling: str = self.doc["experiment"].get("scaling", "strong")
        return scaling

    @property
    def variants(self) -> dict[str, dict[str, Any]]:
        """Named lists of pitfalls; "fixed" (none) is implicit."""
        return {k: v for k, v in self.doc.get("variants", {}).items() if "scripts" not in v}

    @property
    def script_variants(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Variants that run the posted scripts themselves (``verbatim``): name -> their scripts by framework."""
        return {name: {fw: script_entry(value, self.path, fw) for fw, value in v["scripts"].items()}
                for name, v in self.doc.get("variants", {}).items() if "scripts" in v}

    @property
    def scripts(self) -> dict[str, dict[str, Any]]:
        """A script experiment's scripts by framework (reprokit/plan/script_entries.py); {} for a spec one."""
        return {fw: script_entry(value, self.path, fw) for fw, value in self.doc.get("scripts", {}).items()}

    def resolved(self, profile: str) -> dict[str, Any]:
        """The experiment with the profile's overrides applied (already validated)."""
        return _merge(self.doc, self.doc.get("profiles", {}).get(profile, {}))


def from_scripts(name: str, scripts: Mapping[str, Path | tuple[Path, list[str]] | ScriptCommand]) -> Experiment:
    """The experiment `reprokit reproduce --script "FRAMEWORK=PATH ARGS" ...` makes: each script from its root
    where it imports its own package, else from its own folder, or a module from the current folder
    (reprokit/plan/script_entries.py), with its arguments."""
    given = {fw: value if isinstance(value, ScriptCommand) else
             ScriptCommand(value[0], tuple(value[1])) if isinstance(value, tuple) else ScriptCommand(value)
             for fw, value in scripts.items()}
    doc = {"experiment": {"name": name, "title": f"{name}: the users' own scripts", "frameworks": sorted(given)},
           "scripts": {fw: command_entry(fw, command) for fw, command in given.items()}}
    _check(doc, "--script")
    return Experiment(path=Path.cwd() / f"{name}.toml", doc=doc)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads((resources.schemas() / "experiment.schema.json").read_text())
    return jsonschema.Draft202012Validator(fill_per_framework(schema_with_registry(schema), FRAMEWORKS))


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    out.pop("profiles", None)
    return out


def _check(doc: dict[str, Any], where: str) -> None:
    errors = list(_validator().iter_errors(doc))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise UserError(f"{where}: {describe(best, list(best.absolute_path))}")


def load(path: Path) -> Experiment:
    """Read and validate one experiment file and every profile it defines."""
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such experiment file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc})") from None
    _check(doc, str(path))
    names = [("experiment.name", doc["experiment"]["name"]), *(("variants", v) for v in doc.get("variants", {}))]
    for where, name in names:
        if why := safe_names.problem(name):
            raise UserError(f"{path}: {where}: {safe_names.shown(name)} {why}; the kit names files after it")
    experiment = Experiment(path=path, doc=doc)
    for profile in PROFILES:
        _check(experiment.resolved(profile), f"{path} (profile {profile})")
        _check_builders(experiment.resolved(profile).get("model"), experiment.frameworks, path)
    if experiment.scripts and "scaling" in doc["experiment"]:
        raise UserError(f"{path}: experiment.scaling: a script experiment's scripts choose their own batch at each "
                        f"count; scaling applies to the kit's own runs, so leave it out")
    for where, scripts in [("scripts", experiment.scripts),      # each also refuses a script that is not there
                           *((f"variants.{n}.scripts", s) for n, s in experiment.script_variants.items())]:
        stray = set(scripts) - set(experiment.frameworks)
        if stray:
            raise UserError(f"{path}: {where}: {', '.join(sorted(stray))} is not among experiment.frameworks "
                            f"({', '.join(experiment.frameworks)})")
    for name, variant in experiment.variants.items():
        for pitfall in variant["pitfalls"]:
            if pitfall not in PITFALLS:
                raise UserError(f"{path}: variants.{name}.pitfalls: unknown pitfall {pitfall!r}; "
                                f"known: {', '.join(sorted(PITFALLS))}")
            if PITFALLS[pitfall]["framework"] not in experiment.frameworks:
                raise UserError(f"{path}: variants.{name}.pitfalls: {pitfall!r} is a "
                                f"{PITFALLS[pitfall]['framework']} pitfall but the experiment does not run it")
    if path.stem != experiment.name:
        raise UserError(f"{path}: experiment.name {experiment.name!r} must match the file name {path.stem!r}")
    return experiment


def _check_builders(model: dict[str, Any] | None, frameworks: list[str], path: Path) -> None:
    """A custom model names a builder for each framework the experiment runs by default; a built-in one none."""
    if model is None:
        return
    given = [fw for fw in REGISTRY if fw in model]
    if model["name"] == "custom":
        missing = [fw for fw in frameworks if fw not in given]
        if missing:
            raise UserError(f"{path}: model.{missing[0]}: missing; a custom model names a builder "
                            f"(\"module:function\") for each of experiment.frameworks, here "
                            f"{', '.join(label(fw) for fw in frameworks)}")
    elif given:
        raise UserError(f"{path}: model.{given[0]}: only a custom model takes builders; the {model['name']} is "
                        f"the kits' own (drop model.{given[0]}, or set model.name = \"custom\")")


def discover(dirs: list[Path]) -> dict[str, Experiment]:
    """All experiments in the given folders, by name; a name defined twice is refused."""
    found: dict[str, Experiment] = {}
    for folder in dirs:
        if not folder.is_dir():
            raise UserError(f"{folder}: no such experiments folder")
        for path in sorted(folder.glob("*.toml")):
            exp = load(path)
            if exp.name in found:
                raise UserError(f"{path}: experiment {exp.name!r} is already defined in {found[exp.name].path}")
            found[exp.name] = exp
    return found
