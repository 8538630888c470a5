"""The aggregator's (active party's) side of the double-masked protocol: routing and unmasking.

The aggregator routes keys and encrypted shares, fixes each round's survivors and dropped
parties, and learns only the sum: it removes the survivors' self masks and, for each dropped
party, the pairwise masks the survivors added against it. Pure steps over a frozen state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from securevfl.errors import ConfigError, CryptoError, ProtocolError
from securevfl.privacy.primitives import wire
from securevfl.privacy.primitives.buffers import Workspace
from securevfl.privacy.primitives.fixed_point import decode, ring_dtype
from securevfl.privacy.primitives.key_agreement import PublicKey
from securevfl.privacy.primitives.masking import add_pairwise_mask
from securevfl.privacy.primitives.prg import STEP_SELF, add_prg_streams
from securevfl.privacy.primitives.shamir import Share, interpolate_at, lagrange_at_zero, reconstruct_secret
from securevfl.privacy.secagg.config import (
    COMMITMENT_BYTES,
    MASK_KEY,
    SELF_SEED,
    InsufficientSurvivorsError,
    SecAggConfig,
    ShareVerificationError,
)
from securevfl.privacy.secagg.derive import commit_secret, round_pairwise_seeds
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
    for party, blob in publics.items():
        wire.public_key(blob, agg.config.key_agreement, f"channel key of {party!r}")
    directory = KeyDirectory(dict(sorted(publics.items())))
    return evolve(agg, channel_publics=directory.channel_publics), directory


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
        wire.public_key(s.mask_public, agg.config.key_agreement, f"mask key of {s.party!r}")  # full check
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
    new_agg = evolve(
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
    dtype = ring_dtype(agg.config.ring_bits)
    if len(shapes) != 1 or any(m.dtype != dtype for m in received.values()):
        raise ProtocolError(f"masked inputs must be {dtype} arrays of one shape")
    if len(received) < agg.config.threshold:
        raise InsufficientSurvivorsError(
            f"{len(received)} masked inputs in round {r}, below threshold {agg.config.threshold}"
        )
    request = UnmaskRequest(r, tuple(sorted(received)), tuple(sorted(set(publics) - set(received))))
    return (
        evolve(
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


def _remove_dropped_round_seeds(request: UnmaskRequest, responses: Mapping[str, UnmaskResponse], total: np.ndarray,
                                config: SecAggConfig) -> None:
    """Session mode: add each dropped party's round mask, rebuilt from every survivor's round seed with it.

    Each survivor alone knows its round-r seed with a dropped party d (no t of them can stand in for
    another), so recovery needs every survivor's answer; a seed of round r masks no other round.
    """
    r = request.round_index
    missing = sorted(set(request.survivors) - set(responses))
    if request.dropped and missing:
        raise InsufficientSurvivorsError(
            f"round {r}: {', '.join(missing)} sent an input but no unmask response; with session keys "
            f"(rekey_every={config.rekey_every}) the masks against the dropped {', '.join(request.dropped)} "
            "need every survivor's round seed (rekey_every=1 recovers from any t)")
    for d in request.dropped:
        seeds = {u: responses[u].pair_seeds[d] for u in request.survivors}
        # The survivors' masks against d sum to minus d's own mask (the one sign rule): add it.
        add_pairwise_mask(total, d, seeds, r, config.step)


def aggregate(
    agg: AggregatorSecAggState, responses: Sequence[UnmaskResponse], workspace: Workspace | None = None
) -> tuple[AggregatorSecAggState, np.ndarray]:
    """Remove self masks of survivors and dropped parties' pairwise masks; decode the sum.

    Needs answers from at least t survivors (else :class:`InsufficientSurvivorsError`); in session
    mode, after a drop, from every survivor (each holds its own round seed with the dropped party).
    Every reconstructed self-mask seed and mask key is checked against the commitment its owner
    published in the round setup; a mismatch raises :class:`ShareVerificationError` (naming
    the owner, and the responders at fault when a spare response identifies them) instead of
    returning a wrong sum. The result is the float64 sum of the survivors' inputs (a fresh
    array); with a ``workspace`` the masked sum is accumulated in its ``"total"`` array.
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
        recovered = (resp.pair_seeds, resp.key_shares) if config.session_keys else (resp.key_shares, resp.pair_seeds)
        if (set(resp.self_seed_shares) != set(request.survivors) or set(recovered[0]) != set(request.dropped)
                or recovered[1]):
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
    if workspace is None:
        total = np.zeros(shape, dtype=np.uint64)
    else:
        total = workspace.take("total", math.prod(shape)).reshape(shape)
        total.fill(0)
    for masked in inputs.values():
        np.add(total, masked, out=total)  # uint32 inputs (Z_2^32) are widened; decode reduces mod 2^32
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
    if config.session_keys:
        _remove_dropped_round_seeds(request, valid, total, config)
    publics = {} if config.session_keys else agg.round_publics[r]
    agreement = config.agreement()
    for d in (() if config.session_keys else request.dropped):
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
        seeds = round_pairwise_seeds(config, agreement, r, d, keys, survivor_publics)
        # The survivors' masks against d sum to minus d's own mask (the one sign rule): add it.
        add_pairwise_mask(total, d, seeds, r, config.step)
    new_agg = evolve(
        agg,
        pending_inputs={k: v for k, v in agg.pending_inputs.items() if k != r},
        round_publics={k: v for k, v in agg.round_publics.items() if k > r},
        round_commitments={k: v for k, v in agg.round_commitments.items() if k > r},
        requests={k: v for k, v in agg.requests.items() if k >= r},
    )
    return new_agg, decode(total, config.frac_bits, config.ring_bits)


__all__ = [
    "AggregatorSecAggState",
    "aggregate",
    "collect_adverts",
    "collect_setups",
    "unmask_request",
]
