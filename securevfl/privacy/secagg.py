"""Dropout-tolerant secure aggregation with double masking (Bonawitz et al., CCS 2017).

The passive parties blind their embeddings with pairwise masks that cancel in the sum
(EASTER Eq. 4-6, :mod:`securevfl.privacy.masking`). If a party d drops after the others masked
against it, its masks no longer cancel. Following Bonawitz et al. ("Practical Secure
Aggregation for Privacy-Preserving Machine Learning", sec. 4), each party Shamir-shares
(threshold t) its mask key-agreement secret and a self-mask seed b, and adds PRG(b) on top of
its pairwise masks. After the masked inputs arrive, the aggregator (the active party, which
also routes all messages) names the survivors S and the dropped D; every responding party
returns shares of b_u for u in S and of the mask secret of d in D, never both for one party in
one round. The aggregator removes the self masks of S and, with d's reconstructed secret, the
pairwise masks survivors had with d. A late message from d stays hidden by PRG(b_d).

**Where the self-mask seeds live: fresh per round, and so do the mask key pairs.** Self masks
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
and round (see ``benchmarks/secagg.py``). A party that dropped simply stops sending setups;
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
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from securevfl.errors import ConfigError, CryptoError, DataError, ProtocolError
from securevfl.privacy.fixed_point import DEFAULT_FRAC_BITS, decode, encode
from securevfl.privacy.kdf import (
    CHANNEL_KEY_LABEL,
    PAIRWISE_MASK_LABEL,
    encode_fields,
    pairwise_seed,
)
from securevfl.privacy.key_agreement import (
    KEY_AGREEMENT_NAMES,
    KeyAgreement,
    KeyPair,
    PublicKey,
    create_key_agreement,
)
from securevfl.privacy.prg import STEP_SELF, add_prg_streams
from securevfl.privacy.shamir import (
    SHARE_BYTES,
    Share,
    interpolate_at,
    lagrange_at_zero,
    reconstruct_secret,
    split_secret,
)

Urandom = Callable[[int], bytes]
SHARE_AAD_LABEL = "securevfl/secagg/share/v1"
COMMIT_LABEL = "securevfl/secagg/commit/v1"
SELF_SEED_BYTES = 32
COMMITMENT_BYTES = 32
#: Names of the two per-round secrets (commitment domain labels and error messages).
SELF_SEED = "self-mask seed"
MASK_KEY = "mask key"
_NONCE_BYTES = 12


class InsufficientSurvivorsError(ProtocolError):
    """Fewer than the threshold t of parties survived (or answered), so the sum is lost."""


class ShareVerificationError(ProtocolError):
    """A secret reconstructed from the unmask responses does not match its owner's commitment.

    ``party`` owns the secret (``secret`` is :data:`SELF_SEED` or :data:`MASK_KEY`) of round
    ``round_index``. ``suspects`` are the responders whose shares are inconsistent with the
    committed secret, when a verifying subset of the responses was found (empty otherwise: the
    owner dealt bad shares or a bad commitment, or several responses are corrupt). The
    aggregator's state is unchanged, so it may call :func:`aggregate` again without them.
    """

    def __init__(self, party: str, secret: str, round_index: int, suspects: tuple[str, ...], detail: str):
        self.party = party
        self.secret = secret
        self.round_index = round_index
        self.suspects = suspects
        super().__init__(detail)


def default_threshold(n_parties: int) -> int:
    """Return the majority threshold floor(n/2) + 1 (at least 2).

    It is the smallest t for which two disjoint sets of t responders cannot exist.
    """
    return max(2, n_parties // 2 + 1)


def validate_threshold(threshold: object, n_parties: int) -> int:
    """Check a Shamir threshold for ``n_parties``: an int with n/2 < t <= n (and t >= 2).

    t > n/2 is what stops a malicious aggregator from sending different unmask requests to
    two disjoint groups of t parties (one revealing a party's self-mask seed, the other its
    mask key) and unmasking that party (Bonawitz et al., CCS 2017, sec. 4 and 6). Every party
    answers one request per round, so two groups of t > n/2 always overlap and the overlap
    refuses. Raises a one-line :class:`ConfigError` naming the bound.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise ConfigError(f"threshold must be an int, got {type(threshold).__name__}")
    n = n_parties
    if threshold > n:
        raise ConfigError(f"threshold must satisfy t <= n = {n}, got {threshold}")
    if threshold < 2:
        raise ConfigError(f"threshold must be at least 2, got {threshold}")
    if 2 * threshold <= n:
        raise ConfigError(
            f"threshold {threshold} is at most n/2 = {n / 2:g} for {n} parties; secure aggregation "
            f"needs t > n/2 (Bonawitz et al. 2017), e.g. the default {default_threshold(n)}"
        )
    return threshold


@dataclass(frozen=True)
class SecAggConfig:
    """Session parameters shared by all passive parties and the aggregator."""

    session_id: bytes
    parties: tuple[str, ...]
    threshold: int
    key_agreement: str = "x25519"
    frac_bits: int = DEFAULT_FRAC_BITS
    step: str = "secagg/embedding"

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, bytes) or not self.session_id:
            raise ConfigError("session_id must be non-empty bytes")
        parties = tuple(self.parties)
        if len(parties) < 2 or len(set(parties)) != len(parties):
            raise ConfigError("secure aggregation needs at least 2 distinct passive parties")
        if any(not isinstance(p, str) or not p for p in parties):
            raise ConfigError("party names must be non-empty strings")
        object.__setattr__(self, "parties", tuple(sorted(parties)))
        validate_threshold(self.threshold, len(parties))
        if self.key_agreement not in KEY_AGREEMENT_NAMES:
            raise ConfigError(
                f"unknown key agreement {self.key_agreement!r}; valid names: {', '.join(KEY_AGREEMENT_NAMES)}"
            )
        if self.step == STEP_SELF:
            raise ConfigError(f"step label {STEP_SELF!r} is reserved for self masks")
        encode(0.0, self.frac_bits)  # validates frac_bits

    def share_index(self, party: str) -> int:
        """Shamir x coordinate of ``party`` (1-based position in the sorted party list)."""
        try:
            return self.parties.index(party) + 1
        except ValueError:
            raise ProtocolError(f"unknown party {party!r}") from None

    def agreement(self) -> KeyAgreement:
        """Build the key agreement scheme object."""
        return create_key_agreement(self.key_agreement)


# ----------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class KeyAdvert:
    """Passive party -> aggregator: the party's long-lived channel public key."""

    party: str
    channel_public: bytes


@dataclass(frozen=True)
class KeyDirectory:
    """Aggregator -> all passive parties: every channel public key (routed via the aggregator)."""

    channel_publics: Mapping[str, bytes]


@dataclass(frozen=True)
class RoundSetup:
    """Passive party -> aggregator: round mask public key, encrypted shares, commitments.

    ``seed_commitment`` and ``key_commitment`` (:func:`commit_secret`, 32 bytes each) let the
    aggregator verify the self-mask seed and the mask private key it reconstructs.
    """

    party: str
    round_index: int
    mask_public: bytes
    encrypted_shares: Mapping[str, bytes] = field(repr=False)
    seed_commitment: bytes = field(repr=False)
    key_commitment: bytes = field(repr=False)


@dataclass(frozen=True)
class SetupBundle:
    """Aggregator -> one passive party: the round's mask public keys and the shares for it."""

    round_index: int
    mask_publics: Mapping[str, bytes]
    encrypted_shares: Mapping[str, bytes] = field(repr=False)


@dataclass(frozen=True)
class MaskedInput:
    """Passive party -> aggregator: the masked ring vector, plus next round's setup (piggyback)."""

    party: str
    round_index: int
    masked: np.ndarray = field(repr=False)
    next_setup: RoundSetup | None = None


@dataclass(frozen=True)
class UnmaskRequest:
    """Aggregator -> responding parties: who survived (input received) and who dropped."""

    round_index: int
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


@dataclass(frozen=True)
class UnmaskResponse:
    """Passive party -> aggregator: self-seed shares of survivors, key shares of dropped parties."""

    party: str
    round_index: int
    self_seed_shares: Mapping[str, Share]
    key_shares: Mapping[str, Share]


# ----------------------------------------------------------------------------- helpers


def _mask_session(config: SecAggConfig, round_index: int) -> bytes:
    return encode_fields((config.session_id, round_index))


def commit_secret(config: SecAggConfig, round_index: int, party: str, kind: str, secret: bytes) -> bytes:
    """SHA-256 commitment to one round secret of ``party``: H(label, session, round, party, kind, secret).

    Fields are length-prefixed (:func:`~securevfl.privacy.kdf.encode_fields`), so commitments of
    different sessions, rounds, parties or kinds never coincide. The secrets are 256-bit uniform
    values (seed, X25519 key, FFDH exponent), so the hash hides them; it binds by collision
    resistance.
    """
    return hashlib.sha256(
        encode_fields((COMMIT_LABEL, config.session_id, round_index, party, kind, secret))
    ).digest()


def _share_aad(config: SecAggConfig, sender: str, recipient: str, round_index: int, mask_public: bytes) -> bytes:
    return encode_fields((SHARE_AAD_LABEL, config.session_id, sender, recipient, round_index, mask_public))


def _round_pairwise_seeds(
    config: SecAggConfig,
    agreement: KeyAgreement,
    round_index: int,
    own: str,
    own_private: bytes,
    peer_publics: Mapping[str, PublicKey],
) -> dict[str, bytes]:
    """Round seeds s_ij^(r) = HKDF(DH(round keys), label || (session, round) || sorted names)."""
    peers = sorted(peer_publics)
    secrets_ = agreement.exchange_many(own_private, [peer_publics[p] for p in peers], validate=False)
    session = _mask_session(config, round_index)
    return {
        peer: pairwise_seed(secret, session, own, peer, PAIRWISE_MASK_LABEL)
        for peer, secret in zip(peers, secrets_, strict=True)
    }


def _signed_pairwise_sum(
    config: SecAggConfig, own: str, seeds: Mapping[str, bytes], shape: tuple[int, ...], r: int
) -> np.ndarray:
    """Sum_{j>own} PRG(s_j) - Sum_{j<own} PRG(s_j) as uint64 (the EASTER blinding factor)."""
    acc = np.zeros(shape, dtype=np.uint64)
    higher = [seed for peer, seed in seeds.items() if peer > own]
    lower = [seed for peer, seed in seeds.items() if peer < own]
    return add_prg_streams(acc, higher, lower, r, config.step)


def _drop_rounds(mapping: Mapping[int, object], keep: Callable[[int], bool]) -> dict:
    return {r: v for r, v in mapping.items() if keep(r)}


# ----------------------------------------------------------------------------- passive party


@dataclass(frozen=True)
class _RoundSecrets:
    """A party's own secrets for one round, and its own shares of them."""

    mask_keys: KeyPair
    self_seed: bytes = field(repr=False)
    own_key_share: Share = field(repr=False)
    own_seed_share: Share = field(repr=False)


@dataclass(frozen=True)
class _RoundView:
    """What a party holds for one round after receiving its setup bundle."""

    mask_publics: Mapping[str, PublicKey]
    key_shares: Mapping[str, Share] = field(repr=False)
    self_shares: Mapping[str, Share] = field(repr=False)


@dataclass(frozen=True)
class PassiveSecAggState:
    """One passive party's protocol state. Every step returns a new state; nothing mutates."""

    config: SecAggConfig
    name: str
    channel_keys: KeyPair
    channel_aead_keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    round_secrets: Mapping[int, _RoundSecrets] = field(default_factory=dict, repr=False)
    round_views: Mapping[int, _RoundView] = field(default_factory=dict, repr=False)
    masked_rounds: frozenset[int] = frozenset()
    answered_rounds: frozenset[int] = frozenset()
    urandom: Urandom | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(cls, config: SecAggConfig, name: str, urandom: Urandom | None = None) -> PassiveSecAggState:
        """Fresh state with a new channel key pair for ``name``."""
        config.share_index(name)
        return cls(config, name, config.agreement().generate(urandom), urandom=urandom)

    def _draw(self, n: int) -> bytes:
        return (self.urandom or os.urandom)(n)


def advertise_keys(state: PassiveSecAggState) -> KeyAdvert:
    """Step 0: publish the channel public key (routed by the aggregator)."""
    return KeyAdvert(state.name, state.channel_keys.public.to_bytes())


def receive_keys(state: PassiveSecAggState, directory: KeyDirectory) -> PassiveSecAggState:
    """Store peers' channel keys and derive one AEAD key per peer (HKDF of the DH secret)."""
    config = state.config
    if set(directory.channel_publics) != set(config.parties):
        raise ProtocolError("key directory does not list exactly the session's parties")
    if directory.channel_publics[state.name] != state.channel_keys.public.to_bytes():
        raise ProtocolError("key directory carries a wrong channel key for this party")
    agreement = config.agreement()
    keys = {}
    for peer, blob in directory.channel_publics.items():
        if peer == state.name:
            continue
        public = PublicKey.from_bytes(blob)
        if public.scheme != config.key_agreement:
            raise ProtocolError("channel key of the wrong scheme")
        secret = agreement.exchange(state.channel_keys.private, public, validate=False)
        keys[peer] = pairwise_seed(secret, config.session_id, state.name, peer, CHANNEL_KEY_LABEL)
    return dataclasses.replace(state, channel_aead_keys=keys)


def share_keys(state: PassiveSecAggState, round_index: int) -> tuple[PassiveSecAggState, RoundSetup]:
    """Draw round ``round_index``'s mask key pair and self seed; Shamir-share both to all peers.

    Shares for a peer are encrypted for it (the aggregator only routes them). A round can be
    set up once: reusing masks for a second input would leak the difference of the inputs.
    """
    config = state.config
    if not state.channel_aead_keys:
        raise ProtocolError("share_keys before receive_keys")
    if round_index in state.round_secrets or round_index in state.masked_rounds:
        raise ProtocolError(f"round {round_index} was already set up by {state.name!r}")
    agreement = config.agreement()
    mask_keys = agreement.generate(state.urandom)
    self_seed = state._draw(SELF_SEED_BYTES)
    xs = [config.share_index(p) for p in config.parties]
    key_shares = split_secret(mask_keys.private, config.threshold, xs, state.urandom)
    seed_shares = split_secret(self_seed, config.threshold, xs, state.urandom)
    mask_public = mask_keys.public.to_bytes()
    encrypted = {}
    for party, k_share, b_share in zip(config.parties, key_shares, seed_shares, strict=True):
        if party == state.name:
            continue
        if party not in state.channel_aead_keys:
            raise ProtocolError(f"no channel key for {party!r}")
        nonce = state._draw(_NONCE_BYTES)
        aad = _share_aad(config, state.name, party, round_index, mask_public)
        plaintext = k_share.to_bytes() + b_share.to_bytes()
        ciphertext = ChaCha20Poly1305(state.channel_aead_keys[party]).encrypt(nonce, plaintext, aad)
        encrypted[party] = nonce + ciphertext
    own = config.share_index(state.name) - 1
    round_secrets = _RoundSecrets(mask_keys, self_seed, key_shares[own], seed_shares[own])
    new_state = dataclasses.replace(state, round_secrets={**state.round_secrets, round_index: round_secrets})
    setup = RoundSetup(
        state.name,
        round_index,
        mask_public,
        encrypted,
        commit_secret(config, round_index, state.name, SELF_SEED, self_seed),
        commit_secret(config, round_index, state.name, MASK_KEY, mask_keys.private),
    )
    return new_state, setup


def receive_setup(state: PassiveSecAggState, bundle: SetupBundle) -> PassiveSecAggState:
    """Read the round's participants (their mask public keys) and decrypt the shares sent to us."""
    config = state.config
    r = bundle.round_index
    own_secrets = state.round_secrets.get(r)
    if own_secrets is None or r in state.round_views:
        raise ProtocolError(f"{state.name!r} did not set up round {r} or already received it")
    if bundle.mask_publics.get(state.name) != own_secrets.mask_keys.public.to_bytes():
        raise ProtocolError("setup bundle carries a wrong mask key for this party")
    participants = set(bundle.mask_publics)
    if not participants <= set(config.parties):
        raise ProtocolError("setup bundle names unknown parties")
    if set(bundle.encrypted_shares) != participants - {state.name}:
        raise ProtocolError("setup bundle lacks shares from some participant")
    if len(participants) < config.threshold:
        raise InsufficientSurvivorsError(
            f"round {r} has {len(participants)} participants, below threshold {config.threshold}"
        )
    publics: dict[str, PublicKey] = {}
    key_shares = {state.name: own_secrets.own_key_share}
    self_shares = {state.name: own_secrets.own_seed_share}
    own_x = config.share_index(state.name)
    key_len = len(own_secrets.mask_keys.private)
    for sender in sorted(participants - {state.name}):
        public = PublicKey.from_bytes(bundle.mask_publics[sender])
        if public.scheme != config.key_agreement:
            raise ProtocolError("mask key of the wrong scheme")
        publics[sender] = public
        blob = bundle.encrypted_shares[sender]
        aad = _share_aad(config, sender, state.name, r, bundle.mask_publics[sender])
        try:
            plaintext = ChaCha20Poly1305(state.channel_aead_keys[sender]).decrypt(
                blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], aad
            )
        except (InvalidTag, KeyError, ValueError) as exc:
            raise CryptoError("share decryption failed") from exc
        if len(plaintext) != 2 * SHARE_BYTES:
            raise CryptoError("share decryption failed")
        k_share = Share.from_bytes(plaintext[:SHARE_BYTES])
        b_share = Share.from_bytes(plaintext[SHARE_BYTES:])
        if k_share.x != own_x or b_share.x != own_x:
            raise ProtocolError(f"share from {sender!r} is not addressed to our index")
        if (k_share.threshold, k_share.secret_len, b_share.threshold, b_share.secret_len) != (
            config.threshold,
            key_len,
            config.threshold,
            SELF_SEED_BYTES,
        ):
            raise ProtocolError(f"share from {sender!r} has the wrong threshold or length")
        key_shares[sender] = k_share
        self_shares[sender] = b_share
    views = {**state.round_views, r: _RoundView(publics, key_shares, self_shares)}
    return dataclasses.replace(state, round_views=views)


def masked_input(
    state: PassiveSecAggState,
    values: np.ndarray,
    round_index: int,
    prepare_next: bool = True,
) -> tuple[PassiveSecAggState, MaskedInput]:
    """Encode ``values`` and add the self mask and pairwise masks of round ``round_index``.

    With ``prepare_next`` the setup for round + 1 (fresh keys and shares) rides along.
    """
    config = state.config
    r = round_index
    if r in state.masked_rounds:
        raise ProtocolError(f"{state.name!r} already sent a masked input for round {r}")
    view = state.round_views.get(r)
    if view is None:
        raise ProtocolError(f"{state.name!r} has no setup for round {r}")
    secrets_ = state.round_secrets[r]
    n_terms = len(view.mask_publics) + 1
    encoded = encode(values, config.frac_bits, n_terms)
    agreement = config.agreement()
    seeds = _round_pairwise_seeds(config, agreement, r, state.name, secrets_.mask_keys.private, view.mask_publics)
    masked = add_prg_streams(encoded, [secrets_.self_seed], [], r, STEP_SELF)
    higher = [seed for peer, seed in seeds.items() if peer > state.name]
    lower = [seed for peer, seed in seeds.items() if peer < state.name]
    add_prg_streams(masked, higher, lower, r, config.step)
    # Stale rounds (set up but never masked) can no longer be asked for: forget them.
    new_state = dataclasses.replace(
        state,
        masked_rounds=frozenset(m for m in state.masked_rounds if m >= r - 1) | {r},
        round_secrets=_drop_rounds(state.round_secrets, lambda k: k >= r),
        round_views=_drop_rounds(state.round_views, lambda k: k >= r),
    )
    next_setup = None
    if prepare_next:
        new_state, next_setup = share_keys(new_state, r + 1)
    return new_state, MaskedInput(state.name, r, masked, next_setup)


def unmask_response(state: PassiveSecAggState, request: UnmaskRequest) -> tuple[PassiveSecAggState, UnmaskResponse]:
    """Return self-seed shares for survivors and key shares for dropped parties.

    Refuses (:class:`ProtocolError`) a request naming a party both ways, a second request for
    the same round (which could flip a party from one side to the other), a request that omits
    or invents participants, or one with fewer than t survivors.
    """
    config = state.config
    r = request.round_index
    survivors, dropped = set(request.survivors), set(request.dropped)
    if survivors & dropped:
        raise ProtocolError(
            f"refusing to reveal both the self-mask seed and the mask key of {sorted(survivors & dropped)} in round {r}"
        )
    if r in state.answered_rounds:
        raise ProtocolError(f"already answered an unmask request for round {r}")
    view = state.round_views.get(r)
    if r not in state.masked_rounds or view is None:
        raise ProtocolError(f"{state.name!r} holds no masked round {r}")
    if state.name not in survivors:
        raise ProtocolError("the aggregator lists this (responding) party as dropped")
    participants = set(view.mask_publics) | {state.name}
    if survivors | dropped != participants:
        raise ProtocolError("unmask request does not match the round's participants")
    if len(survivors) < config.threshold:
        raise InsufficientSurvivorsError(f"{len(survivors)} survivors in round {r}, below threshold {config.threshold}")
    response = UnmaskResponse(
        state.name,
        r,
        {u: view.self_shares[u] for u in sorted(survivors)},
        {d: view.key_shares[d] for d in sorted(dropped)},
    )
    new_state = dataclasses.replace(
        state,
        answered_rounds=frozenset(a for a in state.answered_rounds if a >= r - 1) | {r},
        round_secrets=_drop_rounds(state.round_secrets, lambda k: k != r),
        round_views=_drop_rounds(state.round_views, lambda k: k != r),
    )
    return new_state, response


# ----------------------------------------------------------------------------- aggregator


@dataclass(frozen=True)
class AggregatorSecAggState:
    """The active party's state: it routes keys and shares and learns only the sums."""

    config: SecAggConfig
    channel_publics: Mapping[str, bytes] = field(default_factory=dict)
    round_publics: Mapping[int, Mapping[str, bytes]] = field(default_factory=dict)
    round_commitments: Mapping[int, Mapping[str, tuple[bytes, bytes]]] = field(default_factory=dict, repr=False)
    pending_inputs: Mapping[int, Mapping[str, np.ndarray]] = field(default_factory=dict, repr=False)
    requests: Mapping[int, UnmaskRequest] = field(default_factory=dict)

    @classmethod
    def create(cls, config: SecAggConfig) -> AggregatorSecAggState:
        """Fresh aggregator state."""
        return cls(config)


def collect_adverts(
    agg: AggregatorSecAggState, adverts: Sequence[KeyAdvert]
) -> tuple[AggregatorSecAggState, KeyDirectory]:
    """Gather every party's channel key and broadcast the directory."""
    publics = {a.party: a.channel_public for a in adverts}
    if len(publics) != len(adverts) or set(publics) != set(agg.config.parties):
        raise ProtocolError("need exactly one key advert from every party")
    for blob in publics.values():
        if PublicKey.from_bytes(blob).scheme != agg.config.key_agreement:
            raise ProtocolError("channel key of the wrong scheme")
    directory = KeyDirectory(dict(sorted(publics.items())))
    return dataclasses.replace(agg, channel_publics=directory.channel_publics), directory


def collect_setups(
    agg: AggregatorSecAggState, setups: Sequence[RoundSetup]
) -> tuple[AggregatorSecAggState, dict[str, SetupBundle]]:
    """Fix round r's participants (the parties that sent a setup) and route their shares."""
    if not setups:
        raise InsufficientSurvivorsError("no setups received")
    r = setups[0].round_index
    if any(s.round_index != r for s in setups):
        raise ProtocolError("setups of different rounds mixed")
    if r in agg.round_publics:
        raise ProtocolError(f"round {r} was already set up")
    by_party = {s.party: s for s in setups}
    if len(by_party) != len(setups) or not set(by_party) <= set(agg.config.parties):
        raise ProtocolError("duplicate or unknown parties in setups")
    if len(by_party) < agg.config.threshold:
        raise InsufficientSurvivorsError(
            f"{len(by_party)} parties set up round {r}, below threshold {agg.config.threshold}"
        )
    for s in setups:
        PublicKey.from_bytes(s.mask_public)  # validates (subgroup check for FFDH)
        if not set(s.encrypted_shares) >= set(by_party) - {s.party}:
            raise ProtocolError(f"setup of {s.party!r} lacks shares for some participant")
        for commitment in (s.seed_commitment, s.key_commitment):
            if not isinstance(commitment, bytes) or len(commitment) != COMMITMENT_BYTES:
                raise ProtocolError(f"setup of {s.party!r} carries a malformed commitment")
    publics = {p: by_party[p].mask_public for p in sorted(by_party)}
    commitments = {p: (by_party[p].seed_commitment, by_party[p].key_commitment) for p in sorted(by_party)}
    bundles = {
        recipient: SetupBundle(
            r,
            publics,
            {s.party: s.encrypted_shares[recipient] for s in setups if s.party != recipient},
        )
        for recipient in publics
    }
    new_agg = dataclasses.replace(
        agg,
        round_publics={**agg.round_publics, r: publics},
        round_commitments={**agg.round_commitments, r: commitments},
    )
    return new_agg, bundles


def unmask_request(
    agg: AggregatorSecAggState, inputs: Sequence[MaskedInput]
) -> tuple[AggregatorSecAggState, UnmaskRequest]:
    """Close the input collection of a round: survivors sent an input, the rest dropped."""
    if not inputs:
        raise InsufficientSurvivorsError("no masked inputs received")
    r = inputs[0].round_index
    publics = agg.round_publics.get(r)
    if publics is None:
        raise ProtocolError(f"round {r} was never set up")
    if r in agg.requests:
        raise ProtocolError(f"round {r} already has an unmask request")
    received = {m.party: m.masked for m in inputs}
    if any(m.round_index != r for m in inputs) or len(received) != len(inputs):
        raise ProtocolError("masked inputs of different rounds or duplicated parties")
    if not set(received) <= set(publics):
        raise ProtocolError("masked input from a party that did not set up the round")
    shapes = {m.shape for m in received.values()}
    if len(shapes) != 1 or any(m.dtype != np.uint64 for m in received.values()):
        raise DataError("masked inputs must be uint64 arrays of one shape")
    if len(received) < agg.config.threshold:
        raise InsufficientSurvivorsError(
            f"{len(received)} masked inputs in round {r}, below threshold {agg.config.threshold}"
        )
    request = UnmaskRequest(r, tuple(sorted(received)), tuple(sorted(set(publics) - set(received))))
    return (
        dataclasses.replace(
            agg,
            pending_inputs={**agg.pending_inputs, r: received},
            requests={**agg.requests, r: request},
        ),
        request,
    )


def _verified_secret(
    config: SecAggConfig,
    r: int,
    owner: str,
    kind: str,
    commitment: bytes,
    shares: Sequence[tuple[str, Share]],
    coefficients: Sequence[int],
) -> bytes:
    """Reconstruct ``owner``'s ``kind`` secret from the first t shares and check its commitment.

    On a mismatch, try to identify the bad share(s): leave out each of the first t responders
    in turn, using the (t + 1)-th as a spare. A subset that verifies gives the committed
    polynomial; responders whose shares lie off it are named. This finds any single bad share
    among the first t + 1 responses; otherwise the error names only the owner. Never returns
    a secret that does not match the commitment.
    """
    t = config.threshold

    def attempt(subset: Sequence[tuple[str, Share]], coeffs: Sequence[int] | None) -> bytes | None:
        try:
            secret = reconstruct_secret([s for _, s in subset], coeffs)
        except CryptoError:  # does not even fit the secret length
            return None
        return secret if commit_secret(config, r, owner, kind, secret) == commitment else None

    secret = attempt(shares[:t], coefficients)
    if secret is not None:
        return secret
    suspects: tuple[str, ...] = ()
    pool = list(shares[: t + 1])
    if len(pool) > t:
        for i in range(t):
            subset = pool[:i] + pool[i + 1 :]
            if attempt(subset, None) is not None:
                points = [(s.x, s.y) for _, s in subset]
                suspects = tuple(sorted(p for p, s in shares if interpolate_at(points, s.x) != s.y))
                break
    if suspects:
        detail = (
            f"round {r}: the {kind} of {owner!r} did not reconstruct to its commitment; the shares "
            f"sent by {', '.join(suspects)} are inconsistent with it (aggregate again without them)"
        )
    else:
        detail = (
            f"round {r}: the {kind} of {owner!r} did not reconstruct to its commitment, and no t of "
            f"the first t + 1 responses verify (bad shares or commitment from {owner!r}, or several "
            "corrupt responses)"
        )
    raise ShareVerificationError(owner, kind, r, suspects, detail)


def aggregate(
    agg: AggregatorSecAggState, responses: Sequence[UnmaskResponse]
) -> tuple[AggregatorSecAggState, np.ndarray]:
    """Remove self masks of survivors and dropped parties' pairwise masks; decode the sum.

    Needs answers from at least t survivors (else :class:`InsufficientSurvivorsError`). Every
    reconstructed self-mask seed and mask key is checked against the commitment its owner
    published in the round setup; a mismatch raises :class:`ShareVerificationError` (naming
    the owner, and the responders at fault when a spare response identifies them) instead of
    returning a wrong sum. The result is the float64 sum of the survivors' inputs.
    """
    config = agg.config
    if not responses:
        raise InsufficientSurvivorsError("no unmask responses")
    r = responses[0].round_index
    request = agg.requests.get(r)
    if request is None:
        raise ProtocolError(f"no unmask request for round {r}")
    valid = {}
    for resp in responses:
        if resp.round_index != r or resp.party not in request.survivors:
            raise ProtocolError("unmask response from a non-survivor or for another round")
        if resp.party in valid:
            raise ProtocolError(f"two unmask responses from {resp.party!r}")
        if set(resp.self_seed_shares) != set(request.survivors) or set(resp.key_shares) != set(request.dropped):
            raise ProtocolError(f"unmask response of {resp.party!r} does not match the request")
        x = config.share_index(resp.party)
        if any(s.x != x for s in (*resp.self_seed_shares.values(), *resp.key_shares.values())):
            raise ProtocolError(f"shares from {resp.party!r} carry a foreign index")
        valid[resp.party] = resp
    if len(valid) < config.threshold:
        raise InsufficientSurvivorsError(
            f"{len(valid)} unmask responses in round {r}, below threshold {config.threshold}"
        )
    ordered = [valid[p] for p in sorted(valid)]
    commitments = agg.round_commitments[r]
    inputs = agg.pending_inputs[r]
    shape = next(iter(inputs.values())).shape
    total = np.zeros(shape, dtype=np.uint64)
    for masked in inputs.values():
        np.add(total, masked, out=total)
    # Same first-t responders for every secret: compute the Lagrange basis once.
    coefficients = lagrange_at_zero([config.share_index(resp.party) for resp in ordered[: config.threshold]])
    self_seeds = [
        _verified_secret(
            config,
            r,
            u,
            SELF_SEED,
            commitments[u][0],
            [(resp.party, resp.self_seed_shares[u]) for resp in ordered],
            coefficients,
        )
        for u in request.survivors
    ]
    add_prg_streams(total, [], self_seeds, r, STEP_SELF)
    publics = agg.round_publics[r]
    agreement = config.agreement()
    for d in request.dropped:
        key_shares = [(resp.party, resp.key_shares[d]) for resp in ordered]
        private = _verified_secret(config, r, d, MASK_KEY, commitments[d][1], key_shares, coefficients)
        try:
            keys = agreement.keypair_from_private(private)
        except (CryptoError, ConfigError, ValueError):
            keys = None
        if keys is None or keys.public.to_bytes() != publics[d]:
            detail = f"round {r}: the committed mask key of {d!r} does not match its published public key"
            raise ShareVerificationError(d, MASK_KEY, r, (), detail)
        survivor_publics = {
            j: PublicKey.from_bytes(publics[j], validate=False)  # validated in collect_setups
            for j in request.survivors
        }
        seeds = _round_pairwise_seeds(config, agreement, r, d, private, survivor_publics)
        # Survivor j added +PRG(s_jd) if d > j, else -PRG(s_jd): undo exactly that.
        add_prg_streams(
            total,
            [seed for j, seed in seeds.items() if d < j],
            [seed for j, seed in seeds.items() if d > j],
            r,
            config.step,
        )
    new_agg = dataclasses.replace(
        agg,
        pending_inputs={k: v for k, v in agg.pending_inputs.items() if k != r},
        round_publics={k: v for k, v in agg.round_publics.items() if k > r},
        round_commitments={k: v for k, v in agg.round_commitments.items() if k > r},
        requests={k: v for k, v in agg.requests.items() if k >= r},
    )
    return new_agg, decode(total, config.frac_bits)


# ----------------------------------------------------------------------------- simulator


@dataclass(frozen=True)
class SimulatedRound:
    """One simulated round: the recovered sum, the plaintext sum over survivors, who was in."""

    round_index: int
    aggregate: np.ndarray = field(repr=False)
    expected: np.ndarray = field(repr=False)
    survivors: tuple[str, ...]
    dropped: tuple[str, ...]


def simulate_secagg(
    config: SecAggConfig,
    inputs: Sequence[Mapping[str, np.ndarray]],
    drop_before_input: Mapping[int, Collection[str]] | None = None,
    drop_before_unmask: Mapping[int, Collection[str]] | None = None,
    rejoin: Mapping[int, Collection[str]] | None = None,
    urandom: Urandom | None = None,
) -> list[SimulatedRound]:
    """Run all parties and the aggregator in one process (no threads) for ``len(inputs)`` rounds.

    ``drop_before_input[r]``: parties that vanish in round r after the others masked against
    them (they set up round r but send no input). ``drop_before_unmask[r]``: parties that send
    their input in round r and then vanish before the unmask step. Dropped parties stay away
    until ``rejoin[r]`` names them: they send a fresh setup during round r - 1 and take part
    again from round r. Returns, per round, the recovered and the plaintext sum of survivors.
    """
    drop_in = {r: set(v) for r, v in (drop_before_input or {}).items()}
    drop_un = {r: set(v) for r, v in (drop_before_unmask or {}).items()}
    rejoin_at = {r: set(v) for r, v in (rejoin or {}).items()}
    parties = {p: PassiveSecAggState.create(config, p, urandom) for p in config.parties}
    agg = AggregatorSecAggState.create(config)
    agg, directory = collect_adverts(agg, [advertise_keys(s) for s in parties.values()])
    parties = {p: receive_keys(s, directory) for p, s in parties.items()}
    alive = set(config.parties)
    setups = []
    for p in sorted(parties):
        parties[p], setup = share_keys(parties[p], 0)
        setups.append(setup)
    agg, bundles = collect_setups(agg, setups)
    for p, bundle in bundles.items():
        parties[p] = receive_setup(parties[p], bundle)
    results = []
    for r, round_inputs in enumerate(inputs):
        alive -= drop_in.get(r, set())
        masked = []
        for p in sorted(agg.round_publics[r]):
            if p in alive:
                parties[p], message = masked_input(parties[p], round_inputs[p], r)
                masked.append(message)
        agg, request = unmask_request(agg, masked)
        alive -= drop_un.get(r, set())
        responses = []
        for p in request.survivors:
            if p in alive:
                parties[p], response = unmask_response(parties[p], request)
                responses.append(response)
        agg, total = aggregate(agg, responses)
        expected = np.sum([np.asarray(round_inputs[p], dtype=np.float64) for p in request.survivors], axis=0)
        results.append(SimulatedRound(r, total, expected, request.survivors, request.dropped))
        if r + 1 == len(inputs):
            break
        next_setups = [m.next_setup for m in masked if m.next_setup is not None]
        for p in sorted(rejoin_at.get(r + 1, set()) - alive):
            parties[p], setup = share_keys(parties[p], r + 1)
            next_setups.append(setup)
            alive.add(p)
        agg, bundles = collect_setups(agg, next_setups)
        for p, bundle in bundles.items():
            if p in alive:
                parties[p] = receive_setup(parties[p], bundle)
    return results


__all__ = [
    "AggregatorSecAggState",
    "InsufficientSurvivorsError",
    "KeyAdvert",
    "KeyDirectory",
    "MaskedInput",
    "PassiveSecAggState",
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
    "share_keys",
    "simulate_secagg",
    "unmask_request",
    "unmask_response",
    "validate_threshold",
]
