"""A script's launcher, as the user typed it, read before any run: its words, the processes it starts, its rendezvous.

``--script "FRAMEWORK=[LAUNCHER] (PATH | -m MODULE) [ARGS]"``, or ``launcher = "torchrun --nproc-per-node 2"`` in an
experiment file's script entry, names one of the launchers of reprokit/kits/contract/launchers.py before the script. Its
options end at the first ``.py`` or ``.ipynb`` word, or at ``-m``. The plan reads from them how many processes it
starts on this machine (torchrun's ``--nproc-per-node``, accelerate's ``--num_processes`` with ``--multi_gpu``,
fabric's ``--devices``), with ``{devices}`` read as the run's device count, and refuses, in one sentence each: a
count that differs from the devices the run holds, a rendezvous address off this machine, more than one node, and
a word before the script that is not a launcher. Where the user gave no rendezvous address the loopback one is
written into the options and declared, so that nothing in the run's environment moves it.
"""
from __future__ import annotations

import ast
import shlex
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from reprokit.environments import import_scan, notebooks, script_requirements
from reprokit.errors import UserError
from reprokit.kits.contract import launchers as contract
from reprokit.kits.contract.launchers import (
    DEVICES,
    KINDS,
    LOOPBACK,
    NAMES,
    SPAWNS,
    TRAINERS,
    Kind,
    given,
    value,
    with_value,
)
from reprokit.kits.contract.names import label

SCRIPT_SUFFIXES = (".py", ".ipynb")
_NAMED = ", ".join(NAMES[:-1]) + f" or {NAMES[-1]}"


def _end(words: list[str], start: int) -> int | None:
    """Where a launcher's options end: the first ``.py`` or ``.ipynb`` word from ``start``, or ``-m``."""
    return next((i for i in range(start, len(words)) if words[i] == "-m" or words[i].endswith(SCRIPT_SUFFIXES)), None)


def _kind_of(words: list[str]) -> Kind | None:
    return next((k for k in KINDS if tuple(words[:len(k.words)]) == k.words), None)


def split(words: list[str], shown: str) -> tuple[tuple[str, ...], list[str]]:
    """A --script value's words as (its launcher's words, name and options; () where there is none) and the rest,
    ``PATH ARGS`` or ``-m MODULE ARGS``. Words before the script that are not a launcher are refused."""
    kind = _kind_of(words)
    if kind is None:
        end = _end(words, 0)
        if end:
            raise UserError(f"{shown}: {' '.join(words[:end])} is not a launcher the kit runs; give {_NAMED} "
                            f"before the script, or the script alone (the kit runs it with the framework's Python)")
        return (), words
    end = _end(words, len(kind.words))
    if end is None:
        raise UserError(f"{shown}: {kind.name} is given no script; after its options give the script's path (a .py "
                        f"file) or -m MODULE")
    script = 2 if words[end] == "-m" else 1
    taken, left = taken_after(kind.name, words[end + script:])
    return (*words[:end], *taken), [*words[end:end + script], *left]


def taken_after(name: str, args: list[str]) -> tuple[list[str], list[str]]:
    """The launcher's own options among the script's arguments, where it takes them there too (fabric run's click
    command reads its options anywhere before ``--``), and the arguments left to the script. Moved into the
    launcher's options, they mean what they meant: the plan then reads every option of the launcher in one place."""
    after = contract.kind(name).after
    taken: list[str] = []
    left: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--":
            left += args[i:]
            break
        option, eq, _ = args[i].partition("=")
        width = 1 if eq or option not in after else 2
        (taken if option in after else left).extend(args[i:i + width])
        i += width
    return taken, left


def parse(text: str, shown: str) -> tuple[str, list[str]]:
    """An experiment file's ``launcher = "torchrun --nproc-per-node 2"``: the launcher's name and its options."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UserError(f"{shown}: launcher {text!r} does not split as a shell would ({exc}); quote it as you "
                        f"would on a command line") from None
    kind = _kind_of(words)
    if kind is None:
        raise UserError(f"{shown}: launcher {text!r} is not a launcher the kit runs; give {_NAMED} with its options")
    if _end(words, len(kind.words)) is not None:
        raise UserError(f"{shown}: launcher {text!r} names a script; the launcher holds its own options only, and the "
                        f"script goes in path (or module), its arguments in args")
    return kind.name, words[len(kind.words):]


def _text(name: str, options: list[str]) -> str:
    return shlex.join([*name.split(), *options])


def check(name: str, options: list[str], shown: str, module: bool) -> None:
    """What is refused whatever the run: a rendezvous off this machine, more than one node, a module fabric cannot
    run, and a count in a file the kit does not read."""
    kind = contract.kind(name)
    for option in kind.address + kind.endpoint:
        address = value(options, (option,))
        if address is None:
            continue
        host = contract.host_and_port(address)[0] if option in kind.endpoint else address
        if not contract.is_loopback(host):
            way = f"{LOOPBACK}:PORT" if option in kind.endpoint else LOOPBACK
            raise UserError(f"{shown}: {name} {option} {address} puts the rendezvous on {host}, off this machine, and "
                            f"a run keeps all its processes on one machine; leave {option} out (the rendezvous is "
                            f"then on {LOOPBACK}) or give {way}")
    nodes = {"torchrun": ("--nnodes",), "accelerate launch": ("--num_machines", "--num-machines"),
             "fabric run": ("--num-nodes", "--num_nodes")}[_family(kind)]
    asked = value(options, nodes)
    if asked is not None and asked.rpartition(":")[2] != "1":
        raise UserError(f"{shown}: {name} {nodes[0]} {asked} asks for more than one node, and a run holds one "
                        f"machine; leave {nodes[0]} out")
    if module and not kind.runs_modules:
        raise UserError(f"{shown}: {name} runs a script's path, not -m MODULE; give the path of the module's file")
    for option in ("--config_file", "--config-file", "--mpirun_hostfile", "--mpirun-hostfile"):
        if _family(kind) == "accelerate launch" and given(options, (option,)):
            raise UserError(f"{shown}: {name} {option} keeps the launch's settings in a file the kit does not read; "
                            f"give them on the command line (--multi_gpu --num_processes N starts N processes)")


def _family(kind: Kind) -> str:
    """torchrun and python -m torch.distributed.run are one launcher."""
    return "torchrun" if kind.module == "torch.distributed.run" else kind.name


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('s') else 's'}"


def _count(kind: Kind, options: list[str], device: str, devices: int, shown: str) -> tuple[int, str, str]:
    """The processes the launcher starts on this machine, how that was read where it is not plain (else ""), and
    the options that would start ``devices`` processes."""
    family, name = _family(kind), kind.name

    def number(option: str, given_value: str) -> int:
        if not given_value.isdigit() or int(given_value) < 1:
            raise UserError(f"{shown}: {name} {option} {given_value} is not a process count the kit can read for a "
                            f"{device.upper()} run; give a number, or {DEVICES} for the run's device count")
        return int(given_value)

    if family == "torchrun":
        nproc = value(options, ("--nproc-per-node", "--nproc_per_node")) or "1"
        fix = f"--nproc-per-node {devices}"
        if nproc in ("gpu", "auto") and device == "gpu":
            return devices, " (one per GPU the run holds)", fix
        return number("--nproc-per-node", nproc), "", fix
    if family == "accelerate launch":
        fix = f"--multi_gpu --num_processes {devices}"
        asked = value(options, ("--num_processes", "--num-processes"))
        count = number("--num_processes", asked) if asked is not None else None
        if given(options, ("--multi_gpu", "--multi-gpu")):
            return (count if count is not None else devices if device == "gpu" else 1), "", fix
        if not given(options, ("--cpu",)) and device == "gpu" and devices > 1 and (count is None or count > 1):
            return (count or devices), " (accelerate turns --multi_gpu on where it sees more than one GPU)", fix
        why = " (without --multi_gpu accelerate launch starts one process here; more need MPI)" if count and \
            count > 1 else ""
        return 1, why, fix
    fix = f"--devices {devices}"
    if value(options, ("--strategy",)) == "dp":
        return 1, " (--strategy dp runs one process)", fix
    accelerator = value(options, ("--accelerator",)) or "auto"
    on_gpu = accelerator in ("gpu", "cuda") or accelerator == "auto" and device == "gpu"
    asked = value(options, ("--devices",)) or "1"
    if asked == "auto":
        return 1, " (--devices auto is one process)", fix
    if on_gpu and asked == "-1":
        return devices, " (one per GPU the run holds)", fix
    if on_gpu and "," in asked:
        return len([d for d in asked.strip("[]").split(",") if d.strip()]), "", fix
    return number("--devices", asked), "", fix


def planned(name: str, options: list[str], device: str, devices: int, shown: str) -> dict[str, Any]:
    """The spec's launcher (reprokit/kits/contract/spec.py Launcher, as JSON): ``{devices}`` replaced by the run's
    count, the rendezvous address made explicit on loopback, the processes it starts; refused where those are not the
    devices the run holds (``devices``, --devices N)."""
    kind, declared = contract.kind(name), []
    if any(DEVICES in word for word in options):
        options = [word.replace(DEVICES, str(devices)) for word in options]
        declared.append(f"{DEVICES} in {name}'s options is the run's device count, {devices}")
    count, how, fix = _count(kind, options, device, devices, shown)
    if count != devices:
        raise UserError(f"{shown}: {_text(name, options)} starts {_plural(count, 'process')}{how}, and the run holds "
                        f"{_plural(devices, 'device')} (--devices {devices}); give the launcher {fix} (or {DEVICES}), "
                        f"or --devices {count}")
    standalone = _family(kind) == "torchrun" and given(options, ("--standalone",))
    if not (standalone or given(options, kind.address + kind.endpoint)):
        options = with_value(options, kind.address, LOOPBACK)
        declared.append(f"{name}'s rendezvous stays on this machine: {kind.address[0]} {LOOPBACK} given (none was)")
    return {"name": name, "options": options, "processes": count, "declared": declared}


def _called(func: ast.expr) -> str:
    """A call's dotted name as written (``mp.spawn``, ``L.Trainer``, ``spawn``)."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    return ".".join([func.id, *reversed(parts)]) if isinstance(func, ast.Name) else ""


def _starts_here(tree: ast.AST) -> bool:
    imported = {*import_scan.imports(tree), *(f"{n.module}.{a.name}" for n in ast.walk(tree)      # from torch import
                                              if isinstance(n, ast.ImportFrom) and n.module for a in n.names)}

    def imports(*libraries: str) -> bool:
        return any(m == lib or m.startswith(lib + ".") for m in imported for lib in libraries)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called(node.func)
        last = name.rpartition(".")[2]
        if last in SPAWNS[1] and (imports(SPAWNS[0]) or name.startswith(SPAWNS[0] + ".")):
            return True
        if last in TRAINERS[1] and imports(*TRAINERS[0]) and any(k.arg == "devices" for k in node.keywords):
            return True
    return False


def starts_its_processes(folder: Path, script: str) -> bool:
    """Whether a script starts its ranks itself, or one of its own modules it imports does: torch.multiprocessing's
    spawn (or start_processes), or a Lightning Trainer or Fabric given devices=."""
    files, seen = [folder / script], set()
    own = import_scan.own_modules(folder, script)
    while files:
        path = files.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        try:
            tree = ast.parse(notebooks.source(path))
        except SyntaxError:
            continue                 # the import scan names a file that does not parse; here it starts nothing
        if _starts_here(tree):
            return True
        files += [f for name in import_scan.imports(tree) for f in own.get(name.split(".")[0], [])]
    return False


def for_spec(framework: str, entry: dict[str, Any], requirements: dict[str, Any] | None, device: str,
             devices: int) -> dict[str, Any] | None:
    """The launcher of a script's spec (None without one), refused before any run where it does not start one
    process per device the run holds, or where neither the lock nor the script's requirements bring it; and a
    script of the launchers' framework given more than one device without a launcher, spawn or a trainer, which the
    kit never wraps in a launcher of its own."""
    shown = f"the {label(framework)} script {entry['module'] or entry['path']}"
    given_launcher = entry.get("launcher")
    if given_launcher is None:
        if framework == contract.FRAMEWORK and devices > 1 and \
                not starts_its_processes(entry["folder"], entry["path"]):
            raise UserError(f"{shown} runs as one process, and --devices {devices} asks for {devices} ranks: the "
                            f"script starts them through a launcher, torch.multiprocessing.spawn or a trainer's "
                            f"devices=, and the kit never adds one; give its launcher before it (--script "
                            f"\"{framework}=torchrun --nproc-per-node {devices} {entry['path']}\") or --devices 1")
        return None
    launcher = planned(given_launcher["name"], given_launcher["options"], device, devices, shown)
    have = {*map(canonicalize_name, script_requirements.locked(framework)),
            *(canonicalize_name(line.split("==")[0].split()[0]) for line in (requirements or {}).get("install", [])),
            *(canonicalize_name(line.split("==")[0]) for line in (requirements or {}).get("in_lock", []))}
    missing = [p for p in contract.kind(launcher["name"]).packages if canonicalize_name(p) not in have]
    if missing:
        raise UserError(f"{shown}: {launcher['name']} comes from {', '.join(missing)}, which neither the "
                        f"{label(framework)} lock nor the script's requirements have; add --require "
                        f"{framework}={','.join(missing)} (or list them in a requirements.txt beside the script)")
    return launcher
