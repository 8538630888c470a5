"""Executors for batch work (psi.executors): inline, process pool and Ray give the same results."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import psi
from psi.curve import BlindingKey, CurveEngine
from psi.errors import PSIConfigError
from psi.executors import EXECUTORS, ExecutorConfig, InlineExecutor, ProcessExecutor, create_executor


def _square(x: int) -> int:
    return x * x


def test_unknown_executor_lists_the_valid_ones():
    with pytest.raises(PSIConfigError, match="inline.*process.*ray"):
        ExecutorConfig("dask")
    with pytest.raises(PSIConfigError, match="workers"):
        ExecutorConfig("process", workers=0)
    with pytest.raises(PSIConfigError, match="ray_address"):
        ExecutorConfig("process", ray_address="auto")
    assert EXECUTORS == ("inline", "process", "ray")


def test_process_executor_keeps_order_and_a_bounded_window():
    pulled = []

    def tasks():
        for i in range(40):
            pulled.append(i)
            yield i

    ex = ProcessExecutor(2, window_per_worker=2)
    try:
        it = ex.map(_square, tasks())
        first = next(it)
        assert first == 0 and len(pulled) <= ex.window + 1  # not every task submitted up front
        assert [first, *it] == [i * i for i in range(40)]
    finally:
        ex.close()
    assert isinstance(create_executor(ExecutorConfig("process", workers=1)), InlineExecutor)


def _sets(n=6000, overlap=2500):
    a = [f"id-{i}" for i in range(n)]
    b = [f"id-{i}" for i in range(n - overlap, 2 * n - overlap)]
    return a, b



def test_process_and_inline_engines_give_the_same_points():
    items = [f"x{i}" for i in range(5000)]
    key, salt = BlindingKey(os.urandom(32)), os.urandom(32)
    inline, _ = CurveEngine(1).hash_and_blind(items, salt, key)
    with CurveEngine(executor=ProcessExecutor(2), min_parallel_items=1) as eng:
        pooled, _ = eng.hash_and_blind(items, salt, key)
        assert eng.executor_name == "process"
    assert np.array_equal(inline, pooled)


@pytest.fixture(scope="module")
def ray_executor():
    pytest.importorskip("ray")
    from psi.executors import RayExecutor

    t0 = time.perf_counter()
    ex = RayExecutor(workers=2)
    startup = time.perf_counter() - t0
    try:
        yield ex, startup
    finally:
        ex.close()
        import ray

        assert not ray.is_initialized()


def test_ray_executor_gives_the_same_intersection_as_the_process_pool(ray_executor):
    ex, startup = ray_executor
    assert startup < 120
    a, b = _sets()
    truth = set(a) & set(b)
    t0 = time.perf_counter()
    with CurveEngine(executor=ex, min_parallel_items=1, chunk_items=1024) as engine:
        ray_result = psi.run_prepared(
            {"a": psi.prepare_ids(a), "b": psi.prepare_ids(b)}, engine=engine
        )
        assert engine.executor_name == "ray"
    assert time.perf_counter() - t0 < 120
    pool_result = psi.run_local({"a": a, "b": b}, executor=ExecutorConfig("process", workers=2))
    assert ray_result.intersection_size == pool_result.intersection_size == len(truth)
    ray_a, ray_b = [a[i] for i in ray_result.aligned["a"]], [b[i] for i in ray_result.aligned["b"]]
    pool_a = [a[i] for i in pool_result.aligned["a"]]
    assert ray_a == ray_b and set(ray_a) == set(pool_a) == truth


def test_ray_executor_serves_paillier_batch_encryption(ray_executor):
    from securevfl.privacy.paillier import generate_keypair
    from securevfl.privacy.paillier.fast_backend import FastBackend

    ex, _ = ray_executor
    pk, sk = generate_keypair(1024, insecure_allow_small_key=True)  # speed; the path is what is tested
    values = list(range(0, 3000, 7))
    backend = FastBackend(pk, sk, r_bits=448, parallel_min_items=8, executor=ex)
    try:
        ciphertexts = backend.encrypt_raw(values)
        assert backend.decrypt_raw(ciphertexts) == values  # decryption stays local: no key on the cluster
    finally:
        backend.close()
