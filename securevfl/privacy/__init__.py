"""Privacy layer, in layers: primitives, the secure aggregation core, Paillier, aggregation schemes.

Import-light on purpose: nothing is imported until an attribute is used (PEP 562), so
``import securevfl.privacy`` pulls in neither numpy nor ``cryptography`` nor gmpy2, and never torch.

* :mod:`.primitives` — pure cryptographic building blocks:
  :mod:`~.primitives.key_agreement` (``create_key_agreement(name)`` for ``x25519`` (default),
  ``ffdh2048``, ``ffdh3072``, ``modp2048``; ``KeyPair``, ``PublicKey``), :mod:`~.primitives.kdf`
  (``hkdf_sha256``, ``pairwise_seed``), :mod:`~.primitives.prg` (``prg_uint64``: AES-CTR keystream
  as uint64), :mod:`~.primitives.fixed_point` (``encode``, ``decode``, ``ring_sum`` in Z_2^64),
  :mod:`~.primitives.shamir` (``split_secret``, ``reconstruct_secret``, ``Share``),
  :mod:`~.primitives.masking` (the one pairwise-mask sign rule: ``derive_pairwise_seeds``,
  ``add_pairwise_mask``, ``pairwise_mask``, ``mask_values``, ``unmask_sum``) and
  :mod:`~.primitives.wire` (typed readers of received message fields).
* :mod:`.secagg` — the pure Bonawitz double-masking core with dropout recovery: ``SecAggConfig``,
  ``PassiveSecAggState``, ``AggregatorSecAggState``, the steps (``advertise_keys``,
  ``collect_adverts``, ``receive_keys``, ``share_keys``, ``collect_setups``, ``receive_setup``,
  ``masked_input``, ``unmask_request``, ``unmask_response``, ``aggregate``), its wire format
  (:mod:`~.secagg.wire`) and ``simulate_secagg``.
* :mod:`.paillier` — additively homomorphic encryption (backends, keys, packing, encrypted
  tensors) and uniform Z_n ring masks (:mod:`~.paillier.ring_masks`).
* :mod:`.aggregation` — the schemes a method sums passive vectors with (``none``, ``dh``,
  ``pairwise``, ``paillier``) behind one registry: ``create_aggregation(name, config, options)``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_key_agreement": "primitives.key_agreement",
    "KeyPair": "primitives.key_agreement",
    "PublicKey": "primitives.key_agreement",
    "KEY_AGREEMENT_NAMES": "primitives.key_agreement",
    "hkdf_sha256": "primitives.kdf",
    "pairwise_seed": "primitives.kdf",
    "prg_uint64": "primitives.prg",
    "FixedPointConfig": "primitives.fixed_point",
    "encode": "primitives.fixed_point",
    "decode": "primitives.fixed_point",
    "ring_sum": "primitives.fixed_point",
    "max_magnitude": "primitives.fixed_point",
    "derive_pairwise_seeds": "primitives.masking",
    "add_pairwise_mask": "primitives.masking",
    "pairwise_mask": "primitives.masking",
    "mask_values": "primitives.masking",
    "unmask_sum": "primitives.masking",
    "Share": "primitives.shamir",
    "split_secret": "primitives.shamir",
    "reconstruct_secret": "primitives.shamir",
    "SecAggConfig": "secagg",
    "PassiveSecAggState": "secagg",
    "AggregatorSecAggState": "secagg",
    "InsufficientSurvivorsError": "secagg",
    "default_threshold": "secagg",
    "simulate_secagg": "secagg",
    "AggregationConfig": "aggregation",
    "AggregationScheme": "aggregation",
    "aggregation_names": "aggregation",
    "create_aggregation": "aggregation",
    "scheme_option_names": "aggregation",
    "scheme_options": "aggregation",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
