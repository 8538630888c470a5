"""Aggregating the passive parties' vectors at the active party, as interchangeable schemes.

EASTER (paper 004, sec. IV-B/IV-C) sums the passive parties' local embeddings at the active
party; Agg-VFL sums local predictions. *How* the sum is formed is a separate, swappable step,
one module per scheme:

* ``none`` (:mod:`.none`) — plaintext: every passive party sends its vector; the active party
  sums them.
* ``dh`` (:mod:`.dh`) — EASTER's Diffie–Hellman blinding factors with dropout recovery: the
  double-masking protocol of :mod:`securevfl.privacy.secagg` (Bonawitz et al., CCS 2017), with
  fresh mask keys and self-mask seeds every round (= every batch). Public keys and encrypted
  Shamir shares are relayed through the active party, as in the paper. Each round: fixed-point
  encode, mask, the active party adds the masked vectors, removes the self masks of the
  survivors (and the pairwise masks of dropped parties, reconstructed from t shares, each secret
  checked against the commitment in its owner's setup) and decodes only the sum. The threshold
  must exceed n/2.
* ``pairwise`` (:mod:`.pairwise`) — the paper's lightweight blinding exactly as Eq. 4-6: one key
  agreement per session, per-batch masks PRG(s_ij, round) that cancel in the sum
  (:mod:`securevfl.privacy.primitives.masking`). No dropout recovery (``max_dropouts == 0``).
* ``paillier`` (:mod:`.paillier`) — packed Paillier under a passive key holder's key, each
  contribution masked in Z_n and committed (docs/paillier_aggregation.md).

The contract is :mod:`.base` (:class:`AggregationScheme`, its two halves, :class:`AggregationConfig`
shared by all schemes, results and stats); :mod:`.registry` maps names to scheme classes and
imports a scheme's module only when it is used, so this package loads no scheme (and never
gmpy2) until then. A new scheme is one class registered with :func:`register_aggregation`.

Scheme options. Settings only one scheme has (Paillier's key size, key holder, workers, ...) are
that scheme's frozen ``Options`` dataclass (:mod:`.options`). A method passes them as a mapping::

    scheme = create_aggregation("paillier", AggregationConfig(frac_bits=16),
                                {"key_bits": 3072, "key_holder": "passive2", "workers": 4})

Unknown keys raise ConfigError listing :func:`scheme_option_names`; strings (from the command
line) are converted to the field's type; :func:`scheme_options` validates them up front.

Dropouts are *simulated*: the method draws a seeded schedule that all parties know, and the
active party passes the round's dropped parties to ``aggregate`` (a deployment would close the
round on a timeout instead). A dropped party vanishes after the round was set up — so the
others have already masked against it — and comes back for the next round with fresh keys.
"""

from securevfl.privacy.aggregation.base import (
    ActiveAggregator,
    AggregateResult,
    AggregationConfig,
    AggregationScheme,
    AggregationStats,
    PassiveAggregator,
    resolve_key_agreement,
)
from securevfl.privacy.aggregation.options import NoOptions
from securevfl.privacy.aggregation.registry import (
    aggregation_names,
    create_aggregation,
    register_aggregation,
    scheme_class,
    scheme_option_names,
    scheme_options,
)

__all__ = [
    "ActiveAggregator",
    "AggregateResult",
    "AggregationConfig",
    "AggregationScheme",
    "AggregationStats",
    "NoOptions",
    "PassiveAggregator",
    "aggregation_names",
    "create_aggregation",
    "register_aggregation",
    "resolve_key_agreement",
    "scheme_class",
    "scheme_option_names",
    "scheme_options",
]
