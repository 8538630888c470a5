"""Privacy layer: secure aggregation (pairwise masks, dropout recovery) and Paillier HE.

Import-light on purpose: nothing is imported until an attribute is used (PEP 562), so
``import securevfl.privacy`` pulls in neither numpy nor ``cryptography``, and never torch.

Secure aggregation public API (all pure functions / frozen dataclasses):

* :mod:`.key_agreement` — ``create_key_agreement(name)`` for ``x25519`` (default), ``ffdh2048``,
  ``ffdh3072``, ``modp2048``; ``KeyPair``, ``PublicKey`` (``to_bytes``/``from_bytes``).
* :mod:`.kdf` — ``hkdf_sha256``, ``pairwise_seed`` (HKDF over label, session ID, sorted names).
* :mod:`.prg` — ``prg_uint64(seed, shape, round_index, step)`` (AES-CTR keystream as uint64).
* :mod:`.fixed_point` — ``encode(x, frac_bits, n_terms)``, ``decode``, ``ring_sum`` in Z_2^64.
* :mod:`.masking` — EASTER Eq. 4-6 masks: ``derive_pairwise_seeds``, ``pairwise_mask``,
  ``mask_values``, ``unmask_sum``.
* :mod:`.shamir` — ``split_secret``, ``reconstruct_secret``, ``Share``.
* :mod:`.secagg` — dropout-tolerant double-masked protocol: ``SecAggConfig``,
  ``PassiveSecAggState``, ``AggregatorSecAggState`` and the steps ``advertise_keys``,
  ``collect_adverts``, ``receive_keys``, ``share_keys``, ``collect_setups``, ``receive_setup``,
  ``masked_input``, ``unmask_request``, ``unmask_response``, ``aggregate``; ``simulate_secagg``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_key_agreement": "key_agreement",
    "KeyPair": "key_agreement",
    "PublicKey": "key_agreement",
    "KEY_AGREEMENT_NAMES": "key_agreement",
    "hkdf_sha256": "kdf",
    "pairwise_seed": "kdf",
    "prg_uint64": "prg",
    "FixedPointConfig": "fixed_point",
    "encode": "fixed_point",
    "decode": "fixed_point",
    "ring_sum": "fixed_point",
    "max_magnitude": "fixed_point",
    "derive_pairwise_seeds": "masking",
    "pairwise_mask": "masking",
    "mask_values": "masking",
    "unmask_sum": "masking",
    "Share": "shamir",
    "split_secret": "shamir",
    "reconstruct_secret": "shamir",
    "SecAggConfig": "secagg",
    "PassiveSecAggState": "secagg",
    "AggregatorSecAggState": "secagg",
    "InsufficientSurvivorsError": "secagg",
    "default_threshold": "secagg",
    "simulate_secagg": "secagg",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
