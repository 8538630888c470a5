"""Wire format of the double-masked protocol: one builder and one validating parser per message.

Messages travel as plain dicts of bytes, ints, lists and arrays under the named keys below (the
codec never pickles). Every ``parse_*`` checks each field's presence, type and range and raises
:class:`~securevfl.errors.ProtocolError` on anything malformed, so a received message is never
indexed raw. Parsers of messages that name their sender take ``src``: a message that names
another party than the one it came from is refused.
"""

from __future__ import annotations

from typing import Any

from securevfl.errors import ConfigError, ProtocolError
from securevfl.privacy.primitives import wire
from securevfl.privacy.primitives.kdf import SEED_BYTES
from securevfl.privacy.primitives.shamir import SHARE_BYTES, Share
from securevfl.privacy.secagg.config import COMMITMENT_BYTES, SecAggConfig
from securevfl.privacy.secagg.messages import (
    KeyAdvert,
    KeyDirectory,
    MaskedInput,
    RoundSetup,
    SetupBundle,
    UnmaskRequest,
    UnmaskResponse,
)

# Named keys (one place, as Flower's secaggplus_constants).
K_SESSION_ID, K_PARTIES, K_THRESHOLD = "session_id", "parties", "threshold"
K_PARTY, K_ROUND, K_CHANNEL_PUBLIC, K_MASK_PUBLIC = "party", "round", "channel_public", "mask_public"
K_SHARES, K_SEED_COMMITMENT, K_KEY_COMMITMENT = "shares", "seed_commitment", "key_commitment"
K_MASK_PUBLICS, K_MASKED, K_NEXT = "mask_publics", "masked", "next"
K_SURVIVORS, K_DROPPED, K_NEXT_BUNDLE = "survivors", "dropped", "next_bundle"
K_SELF_SEED_SHARES, K_KEY_SHARES = "self_seed_shares", "key_shares"
K_REKEY_EVERY, K_PAIR_SEEDS = "rekey_every", "pair_seeds"  # on the wire only when used (session mode)
#: Largest ``rekey_every`` a session may name.
MAX_REKEY_EVERY = 1 << 31
#: Largest Shamir threshold a session may name (the share header's 16-bit field).
MAX_THRESHOLD = 0xFFFF

Wire = dict[str, Any]


def _share(value: Any, what: str) -> Share:
    return Share.from_bytes(wire.blob(value, what, SHARE_BYTES))


def _sender(m: Any, kind: str, src: str | None) -> str:
    party = wire.string(wire.field(m, K_PARTY, kind), f"{kind}: {K_PARTY}")
    if src is not None and party != src:
        raise ProtocolError(f"{kind} from {src} names {party!r}")
    return party


def session_to_wire(c: SecAggConfig) -> Wire:
    """The session the active party proposes: session id, parties, threshold (and ``rekey_every`` unless 1)."""
    message: Wire = {K_SESSION_ID: c.session_id, K_PARTIES: list(c.parties), K_THRESHOLD: c.threshold}
    if c.rekey_every != 1:
        message[K_REKEY_EVERY] = c.rekey_every
    return message


def parse_session(m: Any, key_agreement: str, frac_bits: int, ring_bits: int = 64) -> SecAggConfig:
    """The proposed session; one that breaks the rules (e.g. t <= n/2) is refused.

    ``key_agreement``, ``frac_bits`` and ``ring_bits`` are the party's own settings (not on the wire).
    """
    kind = "session"
    session_id = wire.blob(wire.field(m, K_SESSION_ID, kind), K_SESSION_ID)
    parties = wire.names(wire.field(m, K_PARTIES, kind), K_PARTIES)
    threshold = wire.integer(wire.field(m, K_THRESHOLD, kind), K_THRESHOLD, 0, MAX_THRESHOLD)
    rekey_every = wire.integer(m.get(K_REKEY_EVERY, 1), K_REKEY_EVERY, 0, MAX_REKEY_EVERY)  # m: a mapping (above)
    try:
        return SecAggConfig(session_id=session_id, parties=parties, threshold=threshold,
                            key_agreement=key_agreement, frac_bits=frac_bits, ring_bits=ring_bits,
                            rekey_every=rekey_every)
    except ConfigError as exc:
        raise ProtocolError(f"the active party proposed an invalid session: {exc}") from None


def advert_to_wire(a: KeyAdvert) -> Wire:
    """A party's channel public key."""
    return {K_PARTY: a.party, K_CHANNEL_PUBLIC: a.channel_public}


def parse_advert(m: Any, src: str | None = None) -> KeyAdvert:
    """A key advert (from ``src``, when given)."""
    kind = "key advert"
    return KeyAdvert(_sender(m, kind, src), wire.blob(wire.field(m, K_CHANNEL_PUBLIC, kind), K_CHANNEL_PUBLIC))


def directory_to_wire(d: KeyDirectory) -> Wire:
    """Every party's channel public key, by name."""
    return dict(d.channel_publics)


def parse_directory(m: Any) -> KeyDirectory:
    """The key directory relayed by the active party."""
    return KeyDirectory(wire.str_map(m, "key directory", wire.blob))


def setup_to_wire(s: RoundSetup) -> Wire:
    """A round setup: mask public key, encrypted shares for each peer, two commitments."""
    return {K_PARTY: s.party, K_ROUND: s.round_index, K_MASK_PUBLIC: s.mask_public,
            K_SHARES: dict(s.encrypted_shares), K_SEED_COMMITMENT: s.seed_commitment,
            K_KEY_COMMITMENT: s.key_commitment}


def parse_setup(m: Any, src: str | None = None) -> RoundSetup:
    """A round setup (from ``src``, when given)."""
    kind = "round setup"
    return RoundSetup(
        _sender(m, kind, src),
        wire.integer(wire.field(m, K_ROUND, kind), K_ROUND),
        wire.blob(wire.field(m, K_MASK_PUBLIC, kind), K_MASK_PUBLIC),
        wire.str_map(wire.field(m, K_SHARES, kind), K_SHARES, wire.blob),
        wire.blob(wire.field(m, K_SEED_COMMITMENT, kind), K_SEED_COMMITMENT, COMMITMENT_BYTES),
        wire.blob(wire.field(m, K_KEY_COMMITMENT, kind), K_KEY_COMMITMENT, COMMITMENT_BYTES),
    )


def bundle_to_wire(b: SetupBundle) -> Wire:
    """One party's view of a round setup: every mask public key and the shares addressed to it."""
    return {K_ROUND: b.round_index, K_MASK_PUBLICS: dict(b.mask_publics), K_SHARES: dict(b.encrypted_shares)}


def parse_bundle(m: Any) -> SetupBundle:
    """A setup bundle relayed by the active party."""
    kind = "setup bundle"
    return SetupBundle(wire.integer(wire.field(m, K_ROUND, kind), K_ROUND),
                       wire.str_map(wire.field(m, K_MASK_PUBLICS, kind), K_MASK_PUBLICS, wire.blob),
                       wire.str_map(wire.field(m, K_SHARES, kind), K_SHARES, wire.blob))


def input_to_wire(x: MaskedInput) -> Wire:
    """A masked input, with next round's setup riding on it (or None)."""
    return {K_PARTY: x.party, K_ROUND: x.round_index, K_MASKED: x.masked,
            K_NEXT: None if x.next_setup is None else setup_to_wire(x.next_setup)}


def parse_input(m: Any, src: str | None = None) -> MaskedInput:
    """A masked input (from ``src``, when given); a piggybacked setup must come from the same party."""
    kind = "masked input"
    party = _sender(m, kind, src)
    masked = wire.ring_array(wire.field(m, K_MASKED, kind), "masked input")  # the ring is checked by the aggregator
    nxt = wire.field(m, K_NEXT, kind)
    return MaskedInput(party, wire.integer(wire.field(m, K_ROUND, kind), K_ROUND), masked,
                       None if nxt is None else parse_setup(nxt, src))


def request_to_wire(q: UnmaskRequest, next_bundle: Wire | None) -> Wire:
    """An unmask request, with next round's setup bundle for the recipient riding on it (or None)."""
    return {K_ROUND: q.round_index, K_SURVIVORS: list(q.survivors), K_DROPPED: list(q.dropped),
            K_NEXT_BUNDLE: next_bundle}


def parse_request(m: Any) -> tuple[UnmaskRequest, SetupBundle | None]:
    """The unmask request and the next round's setup bundle riding on it (if any)."""
    kind = "unmask request"
    request = UnmaskRequest(wire.integer(wire.field(m, K_ROUND, kind), K_ROUND),
                            wire.names(wire.field(m, K_SURVIVORS, kind), K_SURVIVORS),
                            wire.names(wire.field(m, K_DROPPED, kind), K_DROPPED))
    nxt = wire.field(m, K_NEXT_BUNDLE, kind)
    return request, None if nxt is None else parse_bundle(nxt)


def response_to_wire(r: UnmaskResponse) -> Wire:
    """An unmask response: self-seed shares of the survivors, key shares (or round seeds) of the dropped."""
    message: Wire = {K_PARTY: r.party, K_ROUND: r.round_index,
                     K_SELF_SEED_SHARES: {k: s.to_bytes() for k, s in r.self_seed_shares.items()},
                     K_KEY_SHARES: {k: s.to_bytes() for k, s in r.key_shares.items()}}
    if r.pair_seeds:
        message[K_PAIR_SEEDS] = dict(r.pair_seeds)
    return message


def _seed(value: Any, what: str) -> bytes:
    return wire.blob(value, what, SEED_BYTES)


def parse_response(m: Any, src: str | None = None) -> UnmaskResponse:
    """An unmask response (from ``src``, when given)."""
    kind = "unmask response"
    return UnmaskResponse(
        _sender(m, kind, src),
        wire.integer(wire.field(m, K_ROUND, kind), K_ROUND),
        wire.str_map(wire.field(m, K_SELF_SEED_SHARES, kind), K_SELF_SEED_SHARES, _share),
        wire.str_map(wire.field(m, K_KEY_SHARES, kind), K_KEY_SHARES, _share),
        wire.str_map(m.get(K_PAIR_SEEDS, {}), K_PAIR_SEEDS, _seed))  # m: a mapping (the fields above)


__all__ = [
    "advert_to_wire",
    "bundle_to_wire",
    "directory_to_wire",
    "input_to_wire",
    "parse_advert",
    "parse_bundle",
    "parse_directory",
    "parse_input",
    "parse_request",
    "parse_response",
    "parse_session",
    "parse_setup",
    "request_to_wire",
    "response_to_wire",
    "session_to_wire",
    "setup_to_wire",
]
