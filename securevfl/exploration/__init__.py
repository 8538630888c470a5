"""Before training: federated statistics, WOE / IV against the active party's label, cross-party Pearson.

:func:`securevfl.explore` (``securevfl explore``) aligns the parties as training does (PSI), then each
party describes and bins its own columns (:mod:`.stats`, :mod:`.bins`), the per-bin event counts of a
passive party's bins are summed under the active party's Paillier key (:mod:`.protocol`), WOE and IV
follow (:mod:`.woe`), and the active party writes the report (:mod:`.report`, :mod:`.render`).
"""

from securevfl.lazy import lazy_attributes

_LAZY = {"ExploreOptions": "securevfl.exploration.options", "ExploreReport": "securevfl.exploration.report"}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [*_LAZY]
