"""What the protocol derives from its secrets: round pairwise seeds, commitments, share AAD."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

from securevfl.errors import CryptoError
from securevfl.privacy.primitives.kdf import PAIRWISE_MASK_LABEL, encode_fields, hkdf_sha256
from securevfl.privacy.primitives.key_agreement import KeyAgreement, KeyPair, PublicKey
from securevfl.privacy.primitives.masking import derive_pairwise_seeds
from securevfl.privacy.primitives.wire import PeerCryptoError
from securevfl.privacy.secagg.config import SecAggConfig

SHARE_AAD_LABEL = "securevfl/secagg/share/v1"
COMMIT_LABEL = "securevfl/secagg/commit/v1"
EPOCH_PAIR_LABEL = "securevfl/secagg/epoch-pair/v1"
ROUND_SEED_LABEL = "securevfl/secagg/round-seed/v1"


@functools.lru_cache(maxsize=1024, typed=True)
def _encoded(*fields: bytes | str | int) -> bytes:
    """``encode_fields(fields)`` of per-session constants, cached.

    ``typed``: a str subclass or a bool never shares an entry with a str or an int, so
    encode_fields still refuses them.
    """
    return encode_fields(fields)


def round_session(config: SecAggConfig, round_index: int) -> bytes:
    """The KDF session field of round ``round_index``: (session id, round), length-prefixed."""
    return encode_fields((config.session_id, round_index))


def _mask_key_seeds(agreement: KeyAgreement, own: str, own_keys: KeyPair, peer_publics: Mapping[str, PublicKey],
                    session: bytes, label: str, what: str) -> dict[str, bytes]:
    """Pair seeds from DH with validated peer mask keys; a failed agreement names ``what`` (a peer's fault)."""
    try:
        return derive_pairwise_seeds(agreement, own, own_keys, peer_publics, session, label=label, validate=False)
    except CryptoError as exc:  # e.g. a low-order X25519 mask key
        raise PeerCryptoError(f"{what}: key agreement with a peer's mask key failed") from exc


def round_pairwise_seeds(
    config: SecAggConfig,
    agreement: KeyAgreement,
    round_index: int,
    own: str,
    own_keys: KeyPair,
    peer_publics: Mapping[str, PublicKey],
) -> dict[str, bytes]:
    """Round seeds s_ij^(r) = HKDF(DH(round keys), label || (session, round) || sorted names).

    Peer keys were validated when they arrived (``collect_setups`` / ``receive_setup``), so the
    FFDH subgroup check is not repeated.
    """
    return _mask_key_seeds(agreement, own, own_keys, peer_publics, round_session(config, round_index),
                           PAIRWISE_MASK_LABEL, f"round {round_index}")


def epoch_pair_seeds(
    config: SecAggConfig,
    agreement: KeyAgreement,
    own: str,
    own_keys: KeyPair,
    peer_publics: Mapping[str, PublicKey],
) -> dict[str, bytes]:
    """Session mode: a key epoch's pair seeds k_ij = HKDF(DH(epoch keys), label || session || sorted names).

    Never used as a mask seed itself: each round's seed is :func:`round_seed` of it, and only
    round seeds are ever revealed.
    """
    return _mask_key_seeds(agreement, own, own_keys, peer_publics, encode_fields((config.session_id,)),
                           EPOCH_PAIR_LABEL, "key epoch")


def round_seed(pair_seed: bytes, round_index: int) -> bytes:
    """Session mode: round r's pairwise seed s_ij^(r) = HKDF(k_ij, label || r), a PRF of the round.

    Knowing s_ij^(r) for some rounds tells nothing about k_ij or s_ij^(r') of any other round r'
    (HKDF-SHA256 as a PRF), which is why a dropped party's round seeds may be revealed for recovery.
    """
    return hkdf_sha256(pair_seed, _encoded(ROUND_SEED_LABEL) + encode_fields((round_index,)))


def commit_secret(config: SecAggConfig, round_index: int, party: str, kind: str, secret: bytes) -> bytes:
    """SHA-256 commitment to one round secret of ``party``: H(label, session, round, party, kind, secret).

    Fields are length-prefixed (:func:`~securevfl.privacy.primitives.kdf.encode_fields`), so
    commitments of different sessions, rounds, parties or kinds never coincide. The secrets are
    256-bit uniform values (seed, X25519 key, FFDH exponent), so the hash hides them; it binds by
    collision resistance.
    """
    # encode_fields of a concatenation is the concatenation of the encodings: the constant
    # fields' encodings are cached.
    digest = hashlib.sha256(_encoded(COMMIT_LABEL, config.session_id))
    digest.update(encode_fields((round_index,)))
    digest.update(_encoded(party, kind))
    digest.update(encode_fields((secret,)))
    return digest.digest()


def share_aad(config: SecAggConfig, sender: str, recipient: str, round_index: int, mask_public: bytes) -> bytes:
    """Associated data of an encrypted share: binds session, sender, recipient, round and mask key."""
    return _encoded(SHARE_AAD_LABEL, config.session_id, sender, recipient) + encode_fields((round_index, mask_public))


__all__ = ["COMMIT_LABEL", "EPOCH_PAIR_LABEL", "ROUND_SEED_LABEL", "SHARE_AAD_LABEL", "commit_secret",
           "epoch_pair_seeds", "round_pairwise_seeds", "round_seed", "round_session", "share_aad"]
