"""How the parties explore: :class:`ExploreOptions`, declared as settings (the CLI's flags, the API's keywords).

Light on purpose (no numpy, no Paillier): the command line reads these declarations when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from securevfl.exploration.select import parse_select
from securevfl.settings import check_declared, integer, number, one_of, setting

#: Bins per column by default (plus the missing-value bin): ten deciles, the scorecard habit.
DEFAULT_MAX_BINS = 10
#: Added to both counts of a bin where one of them is zero (FATE's default).
DEFAULT_ADJUSTMENT = 0.5
#: What a passive party shows the active party of its columns.
SHARE_STATS = ("summary", "none")


@dataclass(frozen=True)
class ExploreOptions:
    """How the parties explore (``securevfl explore``'s options; the API's keywords)."""

    max_bins: int = setting(DEFAULT_MAX_BINS, rule=integer(2, 255),
                            help="Bins per column (equal-frequency, or the most frequent levels); missing values get "
                                 "one more.")
    key_bits: int = setting(2048, help="Paillier key size of the active party: 2048 | 3072.")
    backend: str = setting("fast", rule=one_of("fast", "phe"), help="Paillier implementation: fast | phe.")
    insecure_allow_small_key: bool = setting(False, cli=False, help="Allow test-sized keys; tests only.")
    workers: int = setting(1, rule=integer(1, 256), help="Worker processes for the Paillier work of each party.")
    epsilon: float | None = setting(None, rule=number(0, open_low=True, optional=True),
                                    help="Noise each passive party's per-bin counts: epsilon-DP per column "
                                         "(two-sided geometric noise); default exact counts.")
    adjustment: float = setting(DEFAULT_ADJUSTMENT, rule=number(0),
                                help="Added to both counts of a bin without events or without non-events "
                                     "(0: such a bin gets WOE 0).")
    correlation: bool = setting(True, off_flag="--no-correlation",
                                help="Skip the cross-party Pearson correlation of numeric columns.")
    share_stats: str = setting("summary", rule=one_of(*SHARE_STATS),
                               help="What passive parties show the active party: summary (column names, statistics, "
                                    "bin edges) | none (anonymous columns).")
    value: bool = setting(False, help="Also estimate each passive party's value: a few SecureBoost trees with and "
                                      "without it (secure; minutes at 2048-bit keys).")
    value_trees: int = setting(20, rule=integer(1, 1000), help="Trees of the value estimate.")
    value_depth: int = setting(5, rule=integer(1, 16), help="Tree depth of the value estimate.")
    value_rows: int = setting(8000, rule=integer(100, 10_000_000),
                              help="Explored rows sampled for the value estimate (80 % fit, 20 % scored).")
    select: str | None = setting(None, cli=False, help="A selection rule such as 'iv>=0.02' (training's --select).")

    def __post_init__(self) -> None:
        from securevfl.privacy.paillier.registry import check_backend_and_key  # here: it loads gmpy2 and the backends

        check_declared(self)
        check_backend_and_key(self.backend, self.key_bits, self.insecure_allow_small_key)
        if self.select is not None:
            parse_select(self.select)



__all__ = ["DEFAULT_ADJUSTMENT", "DEFAULT_MAX_BINS", "SHARE_STATS", "ExploreOptions"]
