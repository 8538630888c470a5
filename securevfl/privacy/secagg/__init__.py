"""Dropout-tolerant secure aggregation with double masking (Bonawitz et al., CCS 2017).

The passive parties blind their embeddings with pairwise masks that cancel in the sum (EASTER
Eq. 4-6; :mod:`securevfl.privacy.primitives.masking` holds the one sign rule). If a party d
drops after the others masked against it, its masks no longer cancel. Following Bonawitz et al.
("Practical Secure Aggregation for Privacy-Preserving Machine Learning", sec. 4), each party
Shamir-shares (threshold t) its mask key-agreement secret and a self-mask seed b, and adds
PRG(b) on top of its pairwise masks. After the masked inputs arrive, the aggregator (the active
party, which also routes all messages) names the survivors S and the dropped D; every responding
party returns shares of b_u for u in S and of the mask secret of d in D, never both for one
party in one round. The aggregator removes the self masks of S and, with d's reconstructed
secret, the pairwise masks survivors had with d. A late message from d stays hidden by PRG(b_d).

**Two key modes** (:attr:`SecAggConfig.rekey_every`). With ``rekey_every=1`` (described in the
next paragraphs, the protocol as first built) every round draws a fresh mask key pair and
Shamir-shares it. With ``rekey_every=0`` (the ``dh`` scheme's default: once per session) or k > 1,
a *key epoch's* mask key pair serves many rounds: each pair derives an epoch pair seed k_ij once
(:func:`~.derive.epoch_pair_seeds`) and round r's pairwise seed s_ij^(r) = HKDF(k_ij, r)
(:func:`~.derive.round_seed`, a PRF of the round). The mask key is then never shared: a dropped
party d's masks are recovered from each survivor's own s_ud^(r) (``UnmaskResponse.pair_seeds``),
which masks no other round, so the attack described next (a session key reconstructed after a
drop unmasks the party's earlier rounds) has nothing to work with. A party that answered for a
dropped party re-keys at the next setup it draws. The price: recovery after a drop needs every
survivor's answer, not any t. docs/easter.md ("Keys once per session") gives the argument.

**Per-round mode: where the self-mask seeds live, fresh per round, and so do the mask key pairs.** Self masks
must be removed in every round, so b_u of every survivor is revealed every round. With a
per-session b_u the aggregator could strip u's self mask from all rounds at once, and the day u
drops (its mask secret is then reconstructed) it could unmask every earlier input of u. The
same attack works with a per-session *mask key pair* even if b is fresh: b_u^(r1) is revealed
in round r1 while u survives, and a drop in r2 > r1 reveals u's key, hence its round-r1 pairwise
masks, hence x_u^(r1). We therefore draw a fresh mask key pair and a fresh self seed for every
round; their shares are generated one round ahead and piggybacked on the masked-input message
of the previous round (the first round's on the setup exchange), so no extra message round is
added. Revealed secrets then only ever concern the round they belong to. The cost is one key
pair generation, n - 1 key agreements, two Shamir splits and n - 1 AEAD encryptions per party
and round (see ``benchmarks/secagg.py``). None of it depends on the input, nor does the round's
mask: a party draws round r + 1's setup with :func:`share_keys` and expands round r's mask with
:func:`round_mask` as soon as round r is set up, and :func:`masked_input` then only encodes and
adds (checking that the prepared mask and setup are this party's, for this round and the next;
each is used once). A party that dropped simply stops sending setups;
it rejoins later by sending a fresh setup (fresh keys) for a future round. Only the long-lived
*channel* key pair (used to encrypt shares for peers) is per session; it is never shared.

Shares addressed to a peer travel through the aggregator encrypted with ChaCha20-Poly1305
under HKDF(DH(channel keys)); the associated data binds session, sender, recipient, round and
the sender's round mask public key, so the aggregator cannot swap or replay them.

**Threshold t > n/2.** Each party answers one unmask request per round and never reveals both
secrets of one party, but with t <= n/2 an aggregator could send different requests to two
disjoint groups of t (one reveals b_u, the other, told u dropped, u's mask key) and unmask u.
With t > n/2 the groups overlap and the overlap refuses, so :class:`SecAggConfig` refuses
t <= n/2 (:func:`validate_threshold`; Bonawitz et al., sec. 4 and 6). This holds while no
passive party colludes with the aggregator: c colluders answer both requests, and the attack
then needs only 2t <= n + c.

**Verified reconstruction.** Shamir shares alone are not verifiable (:mod:`.shamir`). Each
round setup carries SHA-256 commitments (:func:`commit_secret`) to the party's self-mask seed
and mask private key; :func:`aggregate` checks every reconstructed secret against them and
raises :class:`ShareVerificationError` naming the owner (and, when one spare response allows
it, the responders whose shares are off) instead of returning a wrong sum.

Trust model: honest-but-curious aggregator and passive parties (as in EASTER), plus the two
checks above against a deviating aggregator or responder. There is no PKI: an actively
malicious aggregator could still substitute channel public keys in the directory and read every
share (Bonawitz's signatures and consistency round are not implemented). Everything here is
pure: states are frozen dataclasses and every step returns a new state and the message to send;
no I/O, no threads.

Modules: :mod:`.config` (session parameters, threshold rule, errors), :mod:`.messages` (the
message dataclasses), :mod:`.derive` (round seeds, commitments, share AAD), :mod:`.passive` and
:mod:`.aggregator` (the two sides' states and steps), :mod:`.wire` (named-key wire format with
validating parsers), :mod:`.simulator` (``simulate_secagg``: everyone in one process). The
``dh`` aggregation scheme (:mod:`securevfl.privacy.aggregation.dh`) runs this core over a channel.
"""

from securevfl.privacy.secagg.aggregator import (
    AggregatorSecAggState,
    aggregate,
    collect_adverts,
    collect_setups,
    unmask_request,
)
from securevfl.privacy.secagg.config import (
    COMMITMENT_BYTES,
    MASK_KEY,
    SELF_SEED,
    SELF_SEED_BYTES,
    InsufficientSurvivorsError,
    SecAggConfig,
    ShareVerificationError,
    default_threshold,
    validate_rekey_every,
    validate_threshold,
)
from securevfl.privacy.secagg.derive import commit_secret, round_pairwise_seeds
from securevfl.privacy.secagg.messages import (
    KeyAdvert,
    KeyDirectory,
    MaskedInput,
    RoundSetup,
    SetupBundle,
    UnmaskRequest,
    UnmaskResponse,
)
from securevfl.privacy.secagg.passive import (
    PassiveSecAggState,
    RoundMask,
    advertise_keys,
    masked_input,
    receive_keys,
    receive_setup,
    round_mask,
    share_keys,
    unmask_response,
)
from securevfl.privacy.secagg.simulator import SimulatedRound, simulate_secagg

__all__ = [
    "COMMITMENT_BYTES",
    "MASK_KEY",
    "SELF_SEED",
    "SELF_SEED_BYTES",
    "AggregatorSecAggState",
    "InsufficientSurvivorsError",
    "KeyAdvert",
    "KeyDirectory",
    "MaskedInput",
    "PassiveSecAggState",
    "RoundMask",
    "RoundSetup",
    "SecAggConfig",
    "SetupBundle",
    "ShareVerificationError",
    "SimulatedRound",
    "UnmaskRequest",
    "UnmaskResponse",
    "advertise_keys",
    "aggregate",
    "collect_adverts",
    "collect_setups",
    "commit_secret",
    "default_threshold",
    "masked_input",
    "receive_keys",
    "receive_setup",
    "round_mask",
    "round_pairwise_seeds",
    "share_keys",
    "simulate_secagg",
    "unmask_request",
    "unmask_response",
    "validate_rekey_every",
    "validate_threshold",
]
