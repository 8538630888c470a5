"""A passive party's side of the double-masked protocol: a frozen state and pure steps.

Every step takes the state and a received message and returns the new state and the message
to send; nothing mutates, nothing does I/O.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from securevfl.errors import ConfigError, CryptoError, ProtocolError
from securevfl.privacy.primitives import wire
from securevfl.privacy.primitives.buffers import Workspace
from securevfl.privacy.primitives.fixed_point import encode, to_ring
from securevfl.privacy.primitives.kdf import CHANNEL_KEY_LABEL, pairwise_seed
from securevfl.privacy.primitives.key_agreement import KeyPair, PublicKey
from securevfl.privacy.primitives.masking import add_pairwise_mask
from securevfl.privacy.primitives.prg import STEP_SELF, add_prg_streams
from securevfl.privacy.primitives.shamir import SHARE_BYTES, Share, split_secret
from securevfl.privacy.secagg.config import (
    MASK_KEY,
    SELF_SEED,
    SELF_SEED_BYTES,
    InsufficientSurvivorsError,
    SecAggConfig,
    Urandom,
)
from securevfl.privacy.secagg.derive import (
    commit_secret,
    epoch_pair_seeds,
    round_pairwise_seeds,
    round_seed,
    share_aad,
)
from securevfl.privacy.secagg.evolve import evolve
from securevfl.privacy.secagg.messages import (
    KeyAdvert,
    KeyDirectory,
    MaskedInput,
    RoundSetup,
    SetupBundle,
    UnmaskRequest,
    UnmaskResponse,
)

V = TypeVar("V")
_NONCE_BYTES = 12
#: Session mode's stand-in for the key commitment of a setup: no mask key is shared, none is reconstructed.
NO_KEY_COMMITMENT = bytes(32)


def _drop_rounds(mapping: Mapping[int, V], keep: Callable[[int], bool]) -> dict[int, V]:
    return {r: v for r, v in mapping.items() if keep(r)}


@dataclass(frozen=True)
class _RoundSecrets:
    """A party's own secrets for one round, and its own shares of them."""

    mask_keys: KeyPair
    self_seed: bytes = field(repr=False)
    own_key_share: Share | None = field(repr=False)  # None in session mode (the mask key is never shared)
    own_seed_share: Share = field(repr=False)


@dataclass(frozen=True)
class _RoundView:
    """What a party holds for one round after receiving its setup bundle."""

    mask_publics: Mapping[str, PublicKey]
    key_shares: Mapping[str, Share] = field(repr=False)
    self_shares: Mapping[str, Share] = field(repr=False)
    #: Session mode: this round's pairwise seed s_ij^(r) with each peer (empty with fresh keys every round).
    round_seeds: Mapping[str, bytes] = field(default_factory=dict, repr=False)


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
    #: Session mode: the key epoch's mask key pair, the round it was drawn for, and whether the next
    #: setup must draw a new one (this party answered for a dropped party since).
    epoch_keys: KeyPair | None = field(default=None, repr=False)
    epoch_start: int = 0
    rekey_due: bool = False
    #: Session mode: per peer, (own epoch public, peer's epoch public, the epoch pair seed k_ij).
    epoch_seeds: Mapping[str, tuple[bytes, bytes, bytes]] = field(default_factory=dict, repr=False)
    #: Session mode: the highest round set up; a round is never set up twice (its seeds would mask two inputs).
    highest_round: int = -1

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
        public = wire.public_key(blob, config.key_agreement, f"channel key of {peer!r}")
        try:
            secret = agreement.exchange(state.channel_keys.private, public, validate=False)
        except CryptoError as exc:  # e.g. a low-order X25519 key
            raise wire.PeerCryptoError(f"key agreement with the channel key of {peer!r} failed") from exc
        keys[peer] = pairwise_seed(secret, config.session_id, state.name, peer, CHANNEL_KEY_LABEL)
    return evolve(state, channel_aead_keys=keys)


def share_keys(state: PassiveSecAggState, round_index: int) -> tuple[PassiveSecAggState, RoundSetup]:
    """Set up round ``round_index``: a fresh self seed and the round's mask key pair, with their shares.

    With fresh keys every round (``rekey_every=1``) the mask key pair is new and Shamir-shared with
    the self seed. In session mode the key epoch's pair serves (a new one is drawn at the first
    round, every ``rekey_every`` rounds and after this party answered for a dropped party) and only
    the self seed is shared. Shares for a peer are encrypted for it (the aggregator only routes
    them). A round can be set up once: reusing masks for a second input would leak the difference
    of the inputs.
    """
    config = state.config
    if not state.channel_aead_keys:
        raise ProtocolError("share_keys before receive_keys")
    if (round_index in state.round_secrets or round_index in state.masked_rounds
            or (config.session_keys and round_index <= state.highest_round)):
        raise ProtocolError(f"round {round_index} was already set up by {state.name!r}")
    agreement = config.agreement()
    epoch: dict[str, object] = {}
    if not config.session_keys:
        mask_keys = agreement.generate(state.urandom)
    elif (state.epoch_keys is None or state.rekey_due
          or (config.rekey_every and round_index - state.epoch_start >= config.rekey_every)):
        mask_keys = agreement.generate(state.urandom)
        epoch = {"epoch_keys": mask_keys, "epoch_start": round_index, "rekey_due": False, "epoch_seeds": {}}
    else:
        mask_keys = state.epoch_keys
    self_seed = state._draw(SELF_SEED_BYTES)
    xs = [config.share_index(p) for p in config.parties]
    key_shares = None if config.session_keys else split_secret(mask_keys.private, config.threshold, xs,
                                                                state.urandom)
    seed_shares = split_secret(self_seed, config.threshold, xs, state.urandom)
    mask_public = mask_keys.public.to_bytes()
    encrypted = {}
    for i, (party, b_share) in enumerate(zip(config.parties, seed_shares, strict=True)):
        if party == state.name:
            continue
        if party not in state.channel_aead_keys:
            raise ProtocolError(f"no channel key for {party!r}")
        nonce = state._draw(_NONCE_BYTES)
        aad = share_aad(config, state.name, party, round_index, mask_public)
        plaintext = b_share.to_bytes() if key_shares is None else key_shares[i].to_bytes() + b_share.to_bytes()
        ciphertext = ChaCha20Poly1305(state.channel_aead_keys[party]).encrypt(nonce, plaintext, aad)
        encrypted[party] = nonce + ciphertext
    own = config.share_index(state.name) - 1
    round_secrets = _RoundSecrets(mask_keys, self_seed, None if key_shares is None else key_shares[own],
                                  seed_shares[own])
    new_state = evolve(state, round_secrets={**state.round_secrets, round_index: round_secrets},
                       highest_round=max(state.highest_round, round_index), **epoch)
    setup = RoundSetup(
        state.name,
        round_index,
        mask_public,
        encrypted,
        commit_secret(config, round_index, state.name, SELF_SEED, self_seed),
        NO_KEY_COMMITMENT if key_shares is None else
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
    key_shares: dict[str, Share] = {} if own_secrets.own_key_share is None else {state.name: own_secrets.own_key_share}
    self_shares = {state.name: own_secrets.own_seed_share}
    own_x = config.share_index(state.name)
    key_len = len(own_secrets.mask_keys.private)
    session = config.session_keys
    for sender in sorted(participants - {state.name}):
        publics[sender] = wire.public_key(bundle.mask_publics[sender], config.key_agreement,
                                          f"mask key of {sender!r}")
        blob = bundle.encrypted_shares[sender]
        aad = share_aad(config, sender, state.name, r, bundle.mask_publics[sender])
        try:
            plaintext = ChaCha20Poly1305(state.channel_aead_keys[sender]).decrypt(
                blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], aad
            )
        except (InvalidTag, KeyError, ValueError) as exc:
            raise wire.PeerCryptoError("share decryption failed") from exc
        if len(plaintext) != (1 if session else 2) * SHARE_BYTES:
            raise wire.PeerCryptoError("share decryption failed")
        b_share = Share.from_bytes(plaintext[-SHARE_BYTES:])
        if b_share.x != own_x:
            raise ProtocolError(f"share from {sender!r} is not addressed to our index")
        if (b_share.threshold, b_share.secret_len) != (config.threshold, SELF_SEED_BYTES):
            raise ProtocolError(f"share from {sender!r} has the wrong threshold or length")
        self_shares[sender] = b_share
        if session:
            continue
        k_share = Share.from_bytes(plaintext[:SHARE_BYTES])
        if k_share.x != own_x:
            raise ProtocolError(f"share from {sender!r} is not addressed to our index")
        if (k_share.threshold, k_share.secret_len) != (config.threshold, key_len):
            raise ProtocolError(f"share from {sender!r} has the wrong threshold or length")
        key_shares[sender] = k_share
    if not session:
        views = {**state.round_views, r: _RoundView(publics, key_shares, self_shares)}
        return evolve(state, round_views=views)
    # Session mode: the epoch pair seed with each peer (agreed once per pair of epoch keys), then this round's.
    own_public = bundle.mask_publics[state.name]
    cache = dict(state.epoch_seeds)
    stale = {p: publics[p] for p in publics
             if cache.get(p, (b"", b""))[:2] != (own_public, bundle.mask_publics[p])}
    if stale:
        fresh = epoch_pair_seeds(config, config.agreement(), state.name, own_secrets.mask_keys, stale)
        cache.update({p: (own_public, bundle.mask_publics[p], seed) for p, seed in fresh.items()})
    seeds = {p: round_seed(cache[p][2], r) for p in publics}
    views = {**state.round_views, r: _RoundView(publics, {}, self_shares, seeds)}
    return evolve(state, round_views=views, epoch_seeds=cache)


@dataclass(frozen=True)
class RoundMask:
    """A party's whole mask of one round, self mask plus pairwise masks, as a flat uint64 array.

    The mask does not depend on the input, so it can be expanded as soon as the round is set
    up (:func:`round_mask`), ahead of the input it will hide. It is as secret as the round's
    seeds: kept by its party, never sent, and added to one input only (:func:`masked_input`
    refuses a second input for a round).
    """

    party: str
    round_index: int
    values: np.ndarray = field(repr=False)


def _round_view(state: PassiveSecAggState, r: int) -> _RoundView:
    if r in state.masked_rounds:
        raise ProtocolError(f"{state.name!r} already sent a masked input for round {r}")
    view = state.round_views.get(r)
    if view is None:
        raise ProtocolError(f"{state.name!r} has no setup for round {r}")
    return view


def _add_round_mask(state: PassiveSecAggState, r: int, view: _RoundView, out: np.ndarray, offset: int) -> None:
    """In place: add elements offset .. offset + out.size - 1 of round r's flat mask to ``out``."""
    config = state.config
    secrets_ = state.round_secrets[r]
    seeds = view.round_seeds if config.session_keys else round_pairwise_seeds(
        config, config.agreement(), r, state.name, secrets_.mask_keys, view.mask_publics)
    add_prg_streams(out, [secrets_.self_seed], [], r, STEP_SELF, offset)
    add_pairwise_mask(out, state.name, seeds, r, config.step, offset=offset)


def round_mask(state: PassiveSecAggState, round_index: int, size: int, out: np.ndarray | None = None) -> RoundMask:
    """Expand the first ``size`` elements of round ``round_index``'s mask (self + pairwise).

    Needs the round's setup bundle (:func:`receive_setup`) and no input sent for it yet. A
    mask expanded for fewer elements than the input is extended when it is used; a longer one
    is cut (the PRG streams of a round are prefix-consistent). ``out``: a C-contiguous uint64
    array of ``size`` elements to expand the mask into (reused memory, see
    :class:`~securevfl.privacy.primitives.buffers.Workspace`), else a fresh one.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(f"mask size must be an int >= 0, got {size!r}")
    view = _round_view(state, round_index)
    if out is None:
        out = np.zeros(size, dtype=np.uint64)
    elif out.dtype != np.uint64 or out.shape != (size,) or not out.flags.c_contiguous:
        raise ConfigError(f"the mask's out array must be a flat C-contiguous uint64 array of {size} elements")
    else:
        out.fill(0)
    _add_round_mask(state, round_index, view, out, 0)
    return RoundMask(state.name, round_index, out)


def _check_prepared_setup(state: PassiveSecAggState, setup: RoundSetup, r: int) -> None:
    """A setup made ahead (by :func:`share_keys`) must be this party's, for round r, from this state."""
    own = state.round_secrets.get(r)
    if (
        setup.party != state.name
        or setup.round_index != r
        or own is None
        or own.mask_keys.public.to_bytes() != setup.mask_public
    ):
        raise ProtocolError(f"the prepared setup is not {state.name!r}'s pending setup of round {r}")


def masked_input(
    state: PassiveSecAggState,
    values: np.ndarray,
    round_index: int,
    prepare_next: bool = True,
    mask: RoundMask | None = None,
    next_setup: RoundSetup | None = None,
    workspace: Workspace | None = None,
) -> tuple[PassiveSecAggState, MaskedInput]:
    """Encode ``values`` and add the self mask and pairwise masks of round ``round_index``.

    ``mask``: the round's mask expanded ahead by :func:`round_mask` (extended here if it is
    shorter than the input); without it the mask is expanded now. The result is the same.
    With ``prepare_next`` the setup for round + 1 (fresh keys and shares) rides along:
    ``next_setup`` if given (made ahead by :func:`share_keys` on this state, checked to be
    this party's pending setup of round + 1), else drawn now. With a ``workspace`` the masked
    vector (64-bit ring) is written into its ``"masked"`` array, valid until the workspace's
    next masked input: send it (the channel copies or serialises it) before the next round.
    """
    config = state.config
    r = round_index
    view = _round_view(state, r)
    if mask is not None and (mask.party != state.name or mask.round_index != r):
        raise ProtocolError(f"the prepared mask is not {state.name!r}'s mask of round {r}")
    n_terms = len(view.mask_publics) + 1
    if workspace is None:  # (a copy only for F-order input)
        masked = np.ascontiguousarray(encode(values, config.frac_bits, n_terms, config.ring_bits))
    else:
        values = np.asarray(values)
        masked = encode(values, config.frac_bits, n_terms, config.ring_bits,
                        out=workspace.take("masked", values.size), scratch=workspace.take("scaled", values.size,
                                                                                          np.float64))
    flat = masked.reshape(-1)  # a view of ``masked``: the mask is added in place
    done = 0
    if mask is not None:
        done = min(mask.values.size, flat.size)
        np.add(flat[:done], mask.values[:done], out=flat[:done])
    if done < flat.size:
        _add_round_mask(state, r, view, flat[done:], done)
    # Stale rounds (set up but never masked) can no longer be asked for: forget them.
    new_state = evolve(
        state,
        masked_rounds=frozenset(m for m in state.masked_rounds if m >= r - 1) | {r},
        round_secrets=_drop_rounds(state.round_secrets, lambda k: k >= r),
        round_views=_drop_rounds(state.round_views, lambda k: k >= r),
    )
    if next_setup is not None:
        _check_prepared_setup(new_state, next_setup, r + 1)
    elif prepare_next:
        new_state, next_setup = share_keys(new_state, r + 1)
    # Z_2^32: the mask was added mod 2^64, cutting to 32 bits reduces mod 2^32 (fixed_point.to_ring).
    return new_state, MaskedInput(state.name, r, to_ring(masked, config.ring_bits), next_setup)


def unmask_response(state: PassiveSecAggState, request: UnmaskRequest) -> tuple[PassiveSecAggState, UnmaskResponse]:
    """Return self-seed shares for survivors and, for dropped parties, what recovers their masks.

    For each dropped party: its key share (fresh keys every round) or this party's round-r seed
    with it (session mode; this party then re-keys at the next setup it draws).

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
    session = config.session_keys
    response = UnmaskResponse(
        state.name,
        r,
        {u: view.self_shares[u] for u in sorted(survivors)},
        {} if session else {d: view.key_shares[d] for d in sorted(dropped)},
        {d: view.round_seeds[d] for d in sorted(dropped)} if session else {},
    )
    new_state = evolve(
        state,
        rekey_due=state.rekey_due or bool(session and dropped),
        answered_rounds=frozenset(a for a in state.answered_rounds if a >= r - 1) | {r},
        round_secrets=_drop_rounds(state.round_secrets, lambda k: k != r),
        round_views=_drop_rounds(state.round_views, lambda k: k != r),
    )
    return new_state, response


__all__ = [
    "PassiveSecAggState",
    "RoundMask",
    "advertise_keys",
    "masked_input",
    "receive_keys",
    "receive_setup",
    "round_mask",
    "share_keys",
    "unmask_response",
]
