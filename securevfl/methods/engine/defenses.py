"""Defences against what the attacks of :mod:`securevfl.attacks` measure, applied by the engine.

Set per run (``--defense NAME=VALUE``, ``defenses={"grad-noise": 0.5}``); each costs accuracy,
which the same run reports next to the attack results:

* ``grad-noise=S``: Gaussian noise on every gradient the active party returns, with a standard
  deviation of S times the root-mean-square of that gradient's entries (Li et al. 2022 compare
  noisy gradients with their own defence);
* ``grad-sparsify=R``: the fraction R of each returned gradient's entries with the smallest
  magnitude is set to zero (gradient sparsification, as evaluated by Fu et al. 2022);
* ``label-dp=EPS``: randomised response on the active party's training labels, once before training
  (Ghazi et al., "Deep Learning with Label Differential Privacy", NeurIPS 2021): a label is kept
  with probability e^EPS / (e^EPS + C - 1), else replaced by one of the other C - 1 classes.

The noise of these mechanisms is secret (an attacker who could predict it could remove it): it is
drawn from a generator seeded by :mod:`secrets`, so two runs with a defence differ. The names and
their strengths are checked with the run's settings (:func:`securevfl.methods.base.check_defenses`).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping

import numpy as np
import torch


def secret_generator() -> torch.Generator:
    """A torch generator seeded from :mod:`secrets` (defence noise must not be predictable)."""
    g = torch.Generator()
    g.manual_seed(secrets.randbits(63))
    return g


def protect(grad: torch.Tensor, defenses: Mapping[str, float], generator: torch.Generator) -> torch.Tensor:
    """``grad`` after the gradient defences (sparsification first, then noise)."""
    ratio = defenses.get("grad-sparsify", 0.0)
    if ratio > 0 and grad.numel():
        k = int(ratio * grad.numel())
        if k:
            threshold = grad.abs().flatten().kthvalue(k).values
            grad = torch.where(grad.abs() > threshold, grad, torch.zeros_like(grad))
    sigma = defenses.get("grad-noise", 0.0)
    if sigma > 0:
        rms = grad.pow(2).mean().sqrt()
        noise = torch.randn(grad.shape, generator=generator, dtype=grad.dtype)
        grad = grad + sigma * rms * noise.to(grad.device)
    return grad


def randomized_response(labels: np.ndarray, n_classes: int, epsilon: float) -> np.ndarray:
    """Each label kept with probability e^eps / (e^eps + C - 1), else a uniformly drawn other class."""
    rng = np.random.default_rng(secrets.randbits(128))
    keep = rng.random(len(labels)) < math.exp(epsilon) / (math.exp(epsilon) + n_classes - 1)
    shift = rng.integers(1, n_classes, size=len(labels))  # a different class, uniformly
    return np.where(keep, labels, (labels + shift) % n_classes).astype(labels.dtype)


__all__ = ["protect", "randomized_response", "secret_generator"]
