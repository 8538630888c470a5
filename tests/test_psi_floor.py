"""The PSI protocol floor: its pieces are the protocol's own hot loops, and its sum counts every operation once."""

from __future__ import annotations

import os

import pytest

from psi.curve import POINT_BYTES, first_off_curve, hash_ids, hash_prefix, hash_to_curve, is_on_curve
from securevfl.bench.primitives import PSIFloorRates, hash_to_curve_samples, point_validation_samples


def test_the_batch_hash_is_the_protocols_hash_and_lands_on_the_curve() -> None:
    ids = [f"user-{i:010d}".encode() for i in range(20)]
    salt = b"\x05" * 32
    points = hash_ids(ids, salt)
    assert points == [hash_to_curve(i, hash_prefix(salt)) for i in ids]
    assert all(len(p) == POINT_BYTES and is_on_curve(p) for p in points)
    assert first_off_curve(points) == -1


def test_validation_names_the_first_point_off_the_curve() -> None:
    points = hash_ids([b"a", b"b", b"c"], b"\x00" * 32)
    twist = next(bytes([k]) + bytes(31) for k in range(2, 255) if not is_on_curve(bytes([k]) + bytes(31)))
    assert first_off_curve([points[0], twist, points[1]]) == 1
    assert first_off_curve([points[0], (2**255 - 19).to_bytes(32, "little")]) == 1  # not canonical


def test_the_protocol_floor_counts_every_multiplication_hash_and_validation_once() -> None:
    rates = PSIFloorRates(mult=100e-6, hash_to_curve=10e-6, validation=5e-6)
    # n IDs a side: 2n own IDs hashed, 4n multiplications, so 2n received points validated
    n = 1000
    one_core = rates.protocol_seconds(4 * n, 2 * n, workers=1)
    assert one_core == pytest.approx(4 * n * 100e-6 + 2 * n * 10e-6 + 2 * n * 5e-6)
    cores = min(2, os.cpu_count() or 1)
    assert rates.protocol_seconds(4 * n, 2 * n, workers=2) == pytest.approx(one_core / cores)


def test_the_rates_are_measured_per_item() -> None:
    assert all(0 < s < 0.01 for s in hash_to_curve_samples(count=50, repeats=2))
    assert all(0 < s < 0.01 for s in point_validation_samples(count=50, repeats=2))
