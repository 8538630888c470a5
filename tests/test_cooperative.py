"""The cooperative scheduler and the in-process fast path of the codec (securevfl.federation.cooperative)."""

import math
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import securevfl
from securevfl.errors import DeadlockError, PartyFailure, PeerTimeoutError, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.federation.transport import InProcessTransport


def same(a, b) -> bool:
    """Deep equality that also compares types, dtypes, shapes and NaNs."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return (a.dtype == b.dtype and a.shape == b.shape and a.flags.c_contiguous
                and np.array_equal(a, b, equal_nan=True))
    if isinstance(a, torch.Tensor):
        return (a.dtype == b.dtype and a.shape == b.shape and a.is_contiguous() and not b.requires_grad
                and a.device == b.device and torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5)))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=300),
    st.binary(max_size=300),
    st.sampled_from(DTYPES).flatmap(lambda d: st.lists(st.integers(0, 5), max_size=3).map(
        lambda shape: (np.arange(int(np.prod(shape))) % 3).astype(d).reshape(shape))),
    st.sampled_from(["float32", "float64", "int64", "uint8", "bool"]).flatmap(
        lambda d: st.integers(0, 4).map(lambda n: torch.arange(n * 3).reshape(n, 3).to(getattr(torch, d)))),
    st.sampled_from([np.float32(1.5), np.int64(-3), np.bool_(True), np.uint8(7)]),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=20), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=40), inner, max_size=20)),
    max_leaves=40)


@settings(max_examples=150, deadline=None)
@given(values)
def test_transfer_carries_what_the_codec_would_decode_and_counts_its_bytes(value):
    wire = codec.encode(value)
    carried = codec.transfer(value)
    if isinstance(carried, codec.Parcel):
        assert carried.nbytes == len(wire)
        assert same(carried.value, codec.decode(wire))
    else:  # off the fast path (big integers): the real encoding
        assert carried == wire


@pytest.mark.parametrize("n", [0, 1, 15, 16, 255, 256, 65535, 65536])
def test_transfer_sizes_at_msgpack_length_boundaries(n):
    for value in ("x" * n, b"x" * n, [1] * n, {str(i): 1 for i in range(n)}, (0,) * n,
                  np.zeros(n, dtype=np.uint8), torch.zeros(n, dtype=torch.uint8)):
        carried = codec.transfer(value)
        assert isinstance(carried, codec.Parcel) and carried.nbytes == len(codec.encode(value)), (type(value), n)


def test_transfer_copies_tensors_so_the_sender_cannot_change_what_was_sent():
    h = torch.arange(12.0, requires_grad=True).reshape(3, 4) * 2
    t = h.detach().t()  # not contiguous
    big_endian = np.arange(6, dtype=">i4").reshape(2, 3)
    payload = {"t": t, "a": big_endian, "l": [t]}
    carried = codec.transfer(payload)
    assert isinstance(carried, codec.Parcel)
    assert same(carried.value, codec.decode(codec.encode(payload)))
    t.add_(100)
    big_endian += 1
    assert carried.value["t"][0, 0] == 0 and carried.value["a"][0, 0] == 0
    assert carried.value["t"].is_contiguous() and not carried.value["t"].requires_grad


@pytest.mark.parametrize("value", [{1: "non-string key"}, 2**80, [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]],
                         np.zeros(2, dtype=np.complex64)])
def test_values_off_the_fast_path_take_the_real_codec(value):
    try:
        wire = codec.encode(value)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            codec.transfer(value)
        return
    assert codec.transfer(value) == wire


def test_a_deadlock_fails_at_once_naming_who_waits_for_whom():
    def active(ctx):
        ctx.stage = "epoch 1"
        return ctx.recv("p", "x.grad")

    def passive(ctx):
        return ctx.recv("active", "x.embedding")

    started = time.perf_counter()
    with pytest.raises(PartyFailure) as info:
        run_parties({"active": active, "p": passive}, active="active")
    assert time.perf_counter() - started < 2
    assert isinstance(info.value.cause, DeadlockError) and info.value.party == "active"
    assert "'x.grad' from p" in str(info.value.cause) and "p waits for active" in str(info.value.cause)


def test_a_party_that_never_yields_is_reported_after_the_receive_timeout():
    def active(ctx):
        return ctx.recv("p", "x.value")

    def passive(ctx):
        time.sleep(1.5)  # computes without ever receiving: the scheduler cannot switch away
        ctx.send("active", "x.value", 1)

    with pytest.raises(PartyFailure) as info:
        run_parties({"active": active, "p": passive}, active="active", recv_timeout=0.3)
    assert isinstance(info.value.cause, PeerTimeoutError) and "'x.value' from p" in str(info.value.cause)


def test_grad_mode_does_not_leak_between_parties():
    seen = {}

    def active(ctx):
        with torch.no_grad():
            value = ctx.recv("p", "x.value")  # parks inside no_grad
            seen["active after"] = torch.is_grad_enabled()
        return value

    def passive(ctx):
        seen["passive"] = torch.is_grad_enabled()
        ctx.send("active", "x.value", 1)

    assert run_parties({"active": active, "p": passive}, active="active").results["active"] == 1
    assert seen == {"passive": True, "active after": False}


def test_broadcast_gives_every_receiver_its_own_copy_and_waiting_is_not_compute():
    def active(ctx):
        ctx.broadcast(["p", "q"], "x.value", torch.zeros(3))
        with ctx.meter.compute():
            return ctx.recv("p", "x.done")  # waits while p sleeps: not this party's compute

    def receiver(ctx):
        value = ctx.recv("active", "x.value")
        value.add_(1)  # must not reach the other receiver
        if ctx.name == "p":
            time.sleep(0.3)
            ctx.send("active", "x.done", 0)
        return float(value.sum())

    run = run_parties({"active": active, "p": receiver, "q": receiver}, active="active")
    assert run.results["p"] == run.results["q"] == 3.0
    assert run.meters["active"].snapshot().compute_s < 0.1


def test_scheduler_must_match_the_transport():
    from securevfl.errors import ConfigError

    with pytest.raises(ConfigError, match="scheduler"):
        run_parties({"a": lambda ctx: None}, active="a", scheduler="fibres")
    with pytest.raises(ConfigError, match="CooperativeTransport"):
        run_parties({"a": lambda ctx: None}, active="a", scheduler="cooperative", transport=InProcessTransport(["a"]))


def test_cooperative_and_threaded_runs_train_the_same_model_with_the_same_bytes():
    reports = {}
    for scheduler in ("cooperative", "threads"):
        reports[scheduler] = securevfl.train("splitnn", "breast-cancer", parties=3, epochs=2, device="cpu",
                                             alignment="plaintext", seed=3, scheduler=scheduler)
    coop, threads = reports["cooperative"], reports["threads"]
    assert coop.metrics == threads.metrics
    assert coop.history == threads.history
    assert coop.cost["comm"] == threads.cost["comm"]
