"""secureboost: vertical gradient-boosted trees with Paillier-encrypted gradients (Cheng et al. 2021; SecureBoost+).

The active party holds the labels and computes each row's gradient g and hessian h; the passive
parties receive them only encrypted (packed, one ciphertext per row) and return encrypted
histograms of split candidates over their own binned columns; the active party decrypts, finds the
best split over every party, and the owner of the winning feature alone learns which feature and
threshold it is (:mod:`.protocol`). Prediction walks the trees jointly: the owner of each node says
which way a row goes (:mod:`.scoring`). Papers: Cheng et al., "SecureBoost: A Lossless Federated
Learning Framework", IEEE Intelligent Systems 36(6), 2021; Fan et al., "SecureBoost+: A High
Performance Gradient Boosting Tree Framework for Large Scale Vertical Federated Learning", 2021;
Wu et al., "VF2Boost", SIGMOD 2021. docs/secureboost.md says what each party learns.
"""

from __future__ import annotations

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, Role, TrainConfig, register_method
from securevfl.methods.secureboost.options import SecureBoostOptions
from securevfl.methods.secureboost.passive import passive_role
from securevfl.methods.secureboost.protocol import KeyPair, active_role


def candidate_limit(data: PartyData, options: SecureBoostOptions) -> int:
    """The most split candidates a party can have: (max_bins − 1) per feature, twice with missing values.

    One more per feature where it does not hold every row (:func:`.histogram.candidates_of`).
    """
    return data.n_features * ((options.max_bins - 1) * 2 + 1)


@register_method
class SecureBoost(Method[SecureBoostOptions]):
    """Hetero SecureBoost: encrypted gradient histograms, split owners keep their thresholds."""

    name = "secureboost"
    summary = "SecureBoost (Cheng et al. 2021) + SecureBoost+ packing: vertical GBDT, Paillier-encrypted gradients"
    supports_objectives = True  # binary, multi-class and regression (its own losses: XGBoost's)
    supports_early_stopping = True
    saves_outside_engine = True
    partial_rows = True  # a row a passive party does not hold follows a learned default direction at its splits
    leaves_out_parties = True  # batch scoring without a passive party that is down: its rows go the default way
    keypair: KeyPair | None = None  # tests may inject a pre-generated key pair
    shuffle_seed: int | None = None  # tests may fix the passive parties' candidate permutations

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        if config.class_weight != "none":
            raise ConfigError("secureboost does not weight classes; its losses are XGBoost's unweighted ones")
        if config.lr != TrainConfig.lr:
            raise ConfigError(f"secureboost takes its step size from the option learning_rate (default 0.3), "
                              f"not from --lr={config.lr}")
        if config.epochs != TrainConfig.epochs:
            raise ConfigError(f"secureboost grows the number of trees the option trees gives (default 50), not "
                              f"--epochs={config.epochs}: pass --option trees={config.epochs}")

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        passives = tuple(scenario.passives)
        active = scenario.party_data(scenario.active)
        datas = {p: scenario.party_data(p) for p in passives}
        limits = {p: candidate_limit(d, self.options) for p, d in datas.items()}
        roles: dict[str, Role] = {p: passive_role(datas[p], self.config, self.options, self.shuffle_seed)
                                  for p in passives}
        roles[scenario.active] = active_role(active, self.config, self.options, passives, limits, self.keypair)
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        """The trees walked jointly: each node's owner says which way a row goes (:mod:`.scoring`)."""
        from securevfl.methods.secureboost.scoring import scoring_roles

        return scoring_roles(self, scenario)


__all__ = ["SecureBoost", "SecureBoostOptions", "candidate_limit"]
