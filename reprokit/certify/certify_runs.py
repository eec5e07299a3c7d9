"""The equivalence certificates of a matrix, made before any timing and cached by what they certify
(reprokit/certify/certify_plan.py decides the pairs and their keys): in the per-user cache, shared by every
state folder of this user, and copied into each state folder that uses them. Results are never shared: only
certificates, whose key holds everything they depend on."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reprokit.certify import certify_plan
from reprokit.certify.certificate import certify_many
from reprokit.certify.script_certificate import certify_scripts
from reprokit.environments import cache as user_cache
from reprokit.kits.contract.files import clean_stale, write_json_atomic
from reprokit.kits.framework_free import rank_checks
from reprokit.results import quarantine
from reprokit.runners.base import Runner

SCHEMA = "reprokit.certificate/1"


def for_matrix(specs: list[dict[str, Any]], runner: Runner, state: Path, enabled: bool, budget: float,
               budget_why: str, shared: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each experiment's equivalence certificates, checked before any timing: one per variant pair
    that runs, on the specs that are timed (their profile, sizes, image or lock), cached by what
    they certify and the trajectory budget (FLOPs, made as ``budget_why`` says), the missing ones made
    together (one process per framework). One that cannot run is recorded with its reason, never left out.
    ``shared``: the cache every state folder of this user reads (by default the per-user cache's
    certificates/); the state folder's certificates/ holds a copy of each one this matrix uses."""
    shared = shared or user_cache.root() / "certificates"
    entries: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []     # (experiment, pair, certificate)
    pairs_of: dict[int, dict[str, Any]] = {}                            # entry -> its pair, where one is certified
    clean_stale(state / "certificates")                                 # what writers that died left half-written
    for experiment, pairs in certify_plan.pairs(specs).items():
        for pair in pairs:
            if pair.get("status") == "not-run" or not enabled:
                entries.append((experiment, None, certify_plan.not_run(pair, "skipped with --no-certify")))
                continue
            pairs_of[len(entries)] = pair
            entries.append((experiment, pair, _found(state / "certificates", shared,
                                                     certify_plan.cache_key(pair, budget))))
    missing = [i for i, (_, _, cert) in enumerate(entries) if cert is None]
    todo = {key: [missing[j] for j in ids]
            for key, ids in certify_plan.by_key([pairs_of[i] for i in missing], budget).items()}
    if todo:
        print(f"certificates: {len(todo)} to make for {sum(map(len, todo.values()))} variant pair(s) (same initial "
              f"weights, logits, steps, arithmetic); {len(entries) - sum(map(len, todo.values()))} cached or not run",
              flush=True)
        log = lambda line: print(line, flush=True)      # noqa: E731
        kits = {k: ids for k, ids in todo.items() if not certify_plan.is_script(pairs_of[ids[0]])}
        made = dict(zip(kits, certify_many([pairs_of[ids[0]] for ids in kits.values()], runner,
                                           [state / "work" / f"cert-{k}" for k in kits], trajectory_budget=budget,
                                           trajectory_budget_why=budget_why, log=log,
                                           steps=certify_plan.matrix_steps(specs[0]["device"]))))
        made |= {k: certify_scripts(pairs_of[ids[0]], runner, state / "work" / f"cert-{k}", log=log)
                 for k, ids in todo.items() if k not in kits}
        for key, ids in todo.items():
            cert = made[key]
            write_json_atomic(state / "certificates" / f"{key}.json", cert)
            _share(shared, key, cert)
            for i in ids:
                entries[i] = (entries[i][0], entries[i][1], cert)
            print(f"certificate: {cert['experiment']} {' / '.join(cert['variant'].values())}"
                  f"{f' (and {len(ids) - 1} pair(s) it stands for)' if len(ids) > 1 else ''}: {cert['status']}: "
                  f"{cert['summary']}", flush=True)
    out: dict[str, list[dict[str, Any]]] = {}
    for experiment, certified, entry in entries:
        assert entry is not None                # each missing one was made above
        if certified:
            # A cached certificate may be of the same model, data and step under another variant name.
            entry = {**entry, "variant": {fw: spec["variant"] for fw, spec in certified.items()},
                     "pitfalls": {fw: spec["pitfalls"] for fw, spec in certified.items()}}
        out.setdefault(experiment, []).append(entry)
    return {experiment: _swept(certs) for experiment, certs in out.items()}


def _swept(certs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A sweep's certificates at N, their batches check told each side's global batch at one device (the sweep's
    certificate there), so that it says how each side scaled its batch with N."""
    at_one = next((c.get("global_batch") for c in certs if c.get("global_batch") and
                   max((c.get("devices") or {}).values(), default=1) == 1), None)
    if not at_one:
        return certs
    out = []
    for c in certs:
        if c.get("at_n"):
            checks = [rank_checks.batches(c["at_n"], at_one) if ch["name"] == "batches" else ch
                      for ch in c["checks"]]
            c = {**c, "checks": checks, "status": "fail" if any(ch["passed"] is False for ch in checks) else
                 c["status"]}
        out.append(c)
    return out


def _found(own: Path, shared: Path, key: str) -> dict[str, Any] | None:
    """The certificate of this key in the state folder, else in the shared cache (copied into the state
    folder, where a resumed run finds what this one used), else None."""
    cert = cached(own, key)
    if cert is None and (cert := cached(shared, key)) is not None:
        write_json_atomic(own / f"{key}.json", cert)
        print(f"certificate: {cert['experiment']} {' / '.join(cert['variant'].values())}: {cert['status']}, "
              f"from the cache ({shared / f'{key}.json'})", flush=True)
    return cert


def _share(shared: Path, key: str, cert: dict[str, Any]) -> None:
    """Put a made certificate in the shared cache. Only a verdict (pass or fail) is shared: an error (a side
    that timed out, an environment that failed) is of this attempt, and the next state folder tries again.
    A cache that cannot be written (read-only, full) costs the next state folder the minutes, not this run."""
    if cert["status"] not in ("pass", "fail"):
        return
    try:
        write_json_atomic(shared / f"{key}.json", cert)
    except OSError as exc:
        print(f"certificate: not kept in the cache {shared} ({exc.strerror or exc}); the next state folder "
              f"makes it again", flush=True)


def cached(folder: Path, key: str) -> dict[str, Any] | None:
    """The cached certificate of this key, or None: none yet, or damaged and set aside (it is made again)."""
    path = folder / f"{key}.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    cert, why = read(data)
    if why is not None:
        quarantine.set_aside(path, f"certificate {key}", why, "it will be made again")
    return cert


def read(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(certificate, None) for a certificate file's bytes, else (None, why) in a few words: what the matrix
    and the report read of one (its experiment, variant names, status, summary and checks) must be there."""
    try:
        cert = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, quarantine.why_unreadable(data)
    if not isinstance(cert, dict) or cert.get("schema") != SCHEMA:
        got = cert.get("schema") if isinstance(cert, dict) else type(cert).__name__
        return None, f"not a certificate of schema {SCHEMA} (it is {got!r})"
    shapes = {"experiment": str, "variant": dict, "status": str, "summary": str, "checks": list}
    wrong = [k for k, kind in shapes.items() if not isinstance(cert.get(k), kind)]
    if wrong:
        return None, f"its {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} missing or of the wrong type"
    if not all(isinstance(v, str) for v in cert["variant"].values()):
        return None, "its variant names are not all text"
    return cert, None
