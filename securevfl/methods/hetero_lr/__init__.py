"""hetero-lr: vertical logistic regression with Paillier and an arbiter (Hardy et al. 2017, FATE).

Roles: the active party (labels and features), passive parties (features) and
an extra ``arbiter`` role that generates the Paillier key pair and is the only one able to decrypt.
Every party keeps its own weights θ_k; nobody sends features, labels or weights. Per batch (the
agreed batch order, with no batch small enough to be solved for: :mod:`._hetero_lr_batches`):

1. each party computes u_k = X_k θ_k;
2. every passive party encrypts [[u_k]] under the arbiter's key and sends it to the active party;
3. the active party forms the encrypted residual of the Taylor-approximated logistic loss,
   [[e]] = Σ_k [[u_k]] + u_active − 2 y' = 4 [[d]] with d = ¼ θᵀx − ½ y' and y' ∈ {−1, +1}
   (second-order expansion of log(1 + exp(−y' θᵀx)) at 0, Hardy et al. section 3.2), and sends
   it (re-randomised) to every passive party;
4. every party computes [[g_k]] = (X_kᵀ / 4B) [[e]] = X_kᵀ[[d]] / B, adds a fresh mask r_k drawn
   uniformly from Z_n (perfect hiding, :mod:`securevfl.privacy.paillier.ring_masks`) and sends [[g_k + r_k]] to
   the arbiter;
5. the arbiter decrypts and returns g_k + r_k mod n; the party removes r_k and steps
   θ_k ← θ_k − lr (g_k + l2 θ_k) (the intercept, at the active party, is not regularised).

With exactly one passive party the active party also monitors the Taylor loss: it sends [[u²]] next
to [[u]], the active party accumulates [[Σ_i ℓ_i]] over the epoch and has the arbiter decrypt it
once, masked the same way (the active party learns one number per epoch, the arbiter nothing).
With two or more passive parties the cross terms u_j u_k need another protocol; loss is not monitored.

Regression (``--task regression``): vertical *linear* regression, the same protocol with the exact
residual e = Σ_k u_k − z of the squared loss ½(θᵀx − z)² on the target z standardised by the
active party (the gradient is X_kᵀ e / B, so the passive parties scale by 1 instead of ¼; the
monitored loss uses [[u]] and [[u²]] the same way). The active party maps predictions back to the
target's scale.

Every row of the active party (the default; ``--require-all-parties`` keeps to the intersection): a
passive party computes, encrypts and receives over its own rows of each batch only; its partial score
is left out (0) of the rows it does not hold, in training and scoring alike, and the active party adds
one learned absent bias per passive party there (indicator columns of its own design matrix). A party
whose share of a batch's encrypted residuals is no larger than its weight count takes no step on it
(a masked zero to the arbiter instead). docs/hetero_lr.md, "Rows a passive party does not hold".

Training's own test evaluation follows FATE: each passive party sends its plaintext partial scores
X_k θ_k for the test rows to the active party, which adds them up and applies the sigmoid. See
docs/hetero_lr.md for what each party learns and the collusion caveats.

Every party, the arbiter included, runs on the split-learning engine (:mod:`.sides`): history,
progress, early stopping (the validation rows are scored as a saved model scores new rows, the
passive parties' scores encrypted and only their sum decrypted), checkpoints and resume.
Shared pieces (options, tags, masked decryption, θ_k as a module) are in :mod:`.protocol`.

Saved models (``--model-dir``): every data party keeps its own θ_k (the active party its θ with the
intercept, and the target's scale for regression); the arbiter keeps nothing, no key is saved.
Scoring a saved model (:mod:`.scoring`) does *not* send plaintext partial scores: the arbiter
generates a fresh key pair per scoring run, the passive parties send [[u_k]], and the active party
has the arbiter decrypt Σ_k [[u_k]] behind a uniform ring mask, so it learns only the sum of the
passive parties' scores (with one passive party, that party's scores) and the arbiter nothing.

Threat model: semi-honest parties only, as Hardy et al. and FATE. The arbiter decrypts whatever
masked ciphertext it is sent, so a *single deviating* party breaks it: a passive party that sends
``[[e]] + r`` (the residual it received) instead of its masked gradient learns e = z - 2y', i.e. the
batch labels (exactly at the first batch, by sign while |z| < 2); an active party that sends
``[[u_k]] + r`` learns a passive party's scores. Preventing this needs zero-knowledge proofs that
each request is X_k^T [[e]] (out of scope); tests/test_hetero_lr.py demonstrates the label leak.

Papers: Hardy et al., "Private federated learning on vertically partitioned data via entity
resolution and additively homomorphic encryption" (arXiv:1711.10677, 2017); FATE's
HeteroLR, Liu et al., JMLR 22(226), 2021 (FATE's guest / host / arbiter are our active party /
passive party / arbiter).
"""

from __future__ import annotations

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, Role, TrainConfig, register_method
from securevfl.methods.engine.loop import split_rows
from securevfl.methods.engine.objective import REGRESSION
from securevfl.methods.hetero_lr.batches import check_batch_size
from securevfl.methods.hetero_lr.protocol import (
    ARBITER,
    ENC_SCORE,
    MASKED_GRADIENT,
    MASKED_LOSS,
    PUBLIC_KEY,
    RESIDUAL,
    TEST_SCORE,
    THETA,
    UNMASKED,
    HeteroLROptions,
    Theta,
    decrypt_masked,
    output_scores,
    send_masked,
)
from securevfl.methods.hetero_lr.scoring import absent_count, arbiter_data, scoring_roles
from securevfl.methods.hetero_lr.sides import ActiveSide, ArbiterSide, HeteroRole, PassiveSide, Settings
from securevfl.privacy.paillier import PaillierPrivateKey, PaillierPublicKey
from securevfl.privacy.paillier.ring_masks import RandBelow


@register_method
class HeteroLR(Method[HeteroLROptions]):
    """Vertical logistic regression: Taylor loss, Paillier-encrypted residuals, arbiter-decrypted masked gradients."""

    name = "hetero-lr"
    summary = "hetero-LR (Hardy et al. 2017 / FATE): Paillier, Taylor loss, arbiter decrypts masked gradients"
    Options = HeteroLROptions
    uses_engine = True  # every data party keeps its θ_k; scoring a saved model: :mod:`.scoring`
    supports_objectives = True  # regression as vertical linear regression; no class weights (see __init__)
    partial_rows = True  # every row of the active party: a passive party's score left out where it lacks the row
    leaves_out_parties = True  # batch scoring without a passive party that is down (a model with absent biases)
    randbelow: RandBelow | None = None  # tests may inject a deterministic mask source
    keypair: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None  # tests may inject a pre-generated key

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        if config.class_weight != "none":
            raise ConfigError("hetero-lr does not weight classes (its residual is encrypted per row); "
                              "the neural methods do: --class-weight with splitnn, easter, local, ...")
        if config.lr != TrainConfig.lr:
            raise ConfigError(f"hetero-lr takes its step size from the option lr (default 0.15), not from "
                              f"--lr={config.lr}; pass --option lr={config.lr} instead")

    def _check_parties(self, scenario: Scenario) -> PartyData:
        """The active party's data, after refusing a scenario hetero-lr cannot run (no passive party, ...)."""
        self.require_passives(scenario)
        if ARBITER in scenario.parties:
            raise ConfigError(f"party name {ARBITER!r} is reserved for hetero-lr's key holder")
        active = scenario.party_data(scenario.active)
        if active.task != REGRESSION and active.n_classes != 2:
            raise ConfigError(f"hetero-lr is binary logistic regression; the task has {active.n_classes} classes")
        return active

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        active = self._check_parties(scenario)
        passives = tuple(scenario.passives)
        datas = {p: scenario.party_data(p) for p in passives}
        weights = [active.n_features + int(self.options.fit_intercept)] + [datas[p].n_features for p in passives]
        n_rows = len(active.X_train)
        # the active party also holds one absent bias per passive party under partial coverage (only it knows)
        check_batch_size(self.config.batch_size, len(split_rows(n_rows, self.config)[0]),
                         max(weights[0] + absent_count(active, passives), *weights[1:]))
        settings = Settings(self.options, min_rows=max(weights) + 1,
                            monitor_loss=self.options.monitor_loss and len(passives) == 1, randbelow=self.randbelow)
        roles: dict[str, Role] = {p: HeteroRole(PassiveSide(self, datas[p], settings)) for p in passives}
        roles[scenario.active] = HeteroRole(ActiveSide(self, active, settings, passives))
        arbiter = arbiter_data(scenario, ARBITER, train_rows=n_rows)
        roles[ARBITER] = HeteroRole(ArbiterSide(self, arbiter, settings, (scenario.active, *passives), self.keypair))
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        """Scoring with saved θ_k: encrypted partial scores, their masked sum decrypted by a fresh arbiter."""
        self._check_parties(scenario)
        return scoring_roles(self, scenario, self.options, ARBITER, randbelow=self.randbelow, keypair=self.keypair)


__all__ = ["ARBITER", "ENC_SCORE", "MASKED_GRADIENT", "MASKED_LOSS", "PUBLIC_KEY", "RESIDUAL", "TEST_SCORE", "THETA",
           "UNMASKED", "HeteroLR", "HeteroLROptions", "Theta", "decrypt_masked", "output_scores", "send_masked"]
