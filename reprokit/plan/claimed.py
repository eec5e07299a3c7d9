"""What the claims in play read, so that a default plan runs nothing else; and the one line on what it left out.

A claim is in play where it is comparable on the profile and device the plan runs on (its ``comparable``'s profiles
and devices, reprokit/claims/verdicts.py comparable_on). By default, of the experiments selected:

- one that claims are about, none of them in play, is left out (ResNet-50 on a CPU: NVIDIA's figures are GPU
  figures), unless ``--only`` names it;
- tuned, and its settings alone, is planned only where a claim in play reads it (``tuned`` or ``+tuned_<name>``).

An experiment no claim is about (one of the user's, or ``--claims none``) runs as asked. ``--all`` plans every
experiment and tuned for each; naming ``--variants`` plans each named variant for every experiment.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reprokit.claims.claims import Claim
from reprokit.claims.verdicts import comparable_on
from reprokit.errors import UserError
from reprokit.plan.experiments import PROFILES, Experiment
from reprokit.plan.request import What
from reprokit.results.runs import TUNED, TUNED_ALONE


@dataclass(frozen=True)
class Choice:
    """The experiments a plan runs, those planned with tuned, and what it leaves out."""
    kept: tuple[str, ...]
    tuned: frozenset[str] = frozenset()
    dropped: dict[str, str] = field(default_factory=dict)      # experiment -> where its claims are comparable
    untuned: tuple[str, ...] = ()                               # kept, tuned asked for, and no claim in play reads it
    ablation_left: bool = False                                 # --ablation would add runs

    def line(self) -> str | None:
        """One line naming what was left out and how to add it, or None where nothing was."""
        parts = [f"tuned of {', '.join(self.untuned)}"] if self.untuned else []
        parts += [f"{name} (its claims are comparable only {where})" for name, where in self.dropped.items()]
        ways = ["--all", *(f"--only {name}" for name in self.dropped)] if parts else []
        if self.ablation_left:
            parts.append("the ablation")
            ways.append("--ablation")
        if not parts:
            return None
        return (f"left out (no claim reads them here): {'; '.join(parts)}: add "
                f"{'them' if len(parts) > 1 else 'it'} with {', '.join(ways)}")


def reads_tuned(claim: Claim) -> bool:
    return any(v == TUNED or v.startswith(TUNED_ALONE) for v in claim.variants())


def _where(claims: list[Claim], profile: str, device: str) -> str:
    """Where claims none of which is comparable on this profile and device are: 'on a gpu', on which profiles."""
    devices = {d for c in claims for d in c.comparable.get("devices", [device])}
    profiles = {p for c in claims for p in c.comparable.get("profiles", [profile])}
    said = [f"on a {' or '.join(sorted(devices))}"] if device not in devices else []
    if profile not in profiles:
        said.append(f"on the {' or '.join(p for p in PROFILES if p in profiles)} profile")
    return " and ".join(said) or f"elsewhere than the {profile} profile on a {device}"


def choose(what: What, experiments: Mapping[str, Experiment], claims: list[Claim] | None, profile: str,
           device: str) -> Choice:
    """What to plan of ``experiments`` (those selected) given the claims about them; refuses, in one sentence, a
    plan left with nothing to run."""
    about: dict[str, list[Claim]] = {}
    for c in claims or []:
        about.setdefault(c.experiment, []).append(c)
    in_play = {name: [c for c in mine if comparable_on(c, profile, device)] for name, mine in about.items()}
    dropped = {name: _where(about[name], profile, device) for name in experiments
               if about.get(name) and not in_play[name] and not what.everything and name not in what.only}
    kept = tuple(name for name in experiments if name not in dropped)
    everywhere = what.everything or what.variants_named
    tuned = frozenset(name for name in kept if TUNED in what.variants and
                      (everywhere or not about.get(name) or any(reads_tuned(c) for c in in_play[name])))
    untuned = tuple(name for name in kept if TUNED in what.variants and name not in tuned)
    # the ablation adds runs to the variants that carry pitfalls, where one is planned
    ablation_left = not what.ablation and any(v in what.variants for name in kept for v in experiments[name].variants)
    choice = Choice(kept, tuned, dropped, untuned, ablation_left)
    if not kept:
        raise UserError(f"nothing to run: no claim about the experiments selected is comparable on the {profile} "
                        f"profile on a {device}; {choice.line()}")
    return choice
