"""Seeded randomness for simulation and agreement, derived from the run seed: never for secrets.

Everything random that the parties agree on (batch order, the validation split, simulated dropouts
and client failures) or that a party draws for itself without a secrecy need (a schedule, model
initialisation, TabNet's obfuscation masks) comes from here. Secrets — keys, masks, Paillier
randomness — come from :mod:`secrets` and the keyed PRG of :mod:`securevfl.privacy`, never from here.

* :func:`simulation_rng` — a numpy ``Generator`` from the seed and integer or string labels
  (a string label enters as its CRC-32);
* :func:`torch_generator` — a torch ``Generator`` from SHA-256 over the seed and string labels;
* :func:`party_generator` — the torch generator of a party's model initialisation in the
  split-learning methods (its own SHA-256 layout, kept so that published figures reproduce).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def label_number(label: int | str) -> int:
    """An integer label as is; a string label as its CRC-32 (stable across runs and machines)."""
    return zlib.crc32(label.encode()) if isinstance(label, str) else int(label)


def simulation_rng(seed: int, *labels: int | str) -> np.random.Generator:
    """A numpy generator for ``(seed, *labels)``: the same at every party that asks with the same labels."""
    return np.random.default_rng([seed, *(label_number(x) for x in labels)])


def torch_generator(seed: int, *labels: str) -> torch.Generator:
    """A torch generator for one party and purpose (``"init"``, ``"obfuscation"``), from SHA-256."""
    import torch

    digest = hashlib.sha256("/".join((str(seed), *labels)).encode()).digest()
    g = torch.Generator()
    g.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return g


def party_generator(seed: int, party: str) -> torch.Generator:
    """A torch generator private to one party (model init), derived from the run seed and its name."""
    import torch

    digest = hashlib.sha256(f"{seed}:{party}".encode()).digest()
    g = torch.Generator()
    g.manual_seed(int.from_bytes(digest[:8], "big") >> 1)
    return g


__all__ = ["label_number", "party_generator", "simulation_rng", "torch_generator"]
