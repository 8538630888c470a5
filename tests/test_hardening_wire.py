"""Hostile frames, finished and hung peers: the codec and the runtime never crash, hang or decode wrongly.

Regression tests for the hardening issue (items 1, 2 and 11) and the fuzz tests of the wire codec and
of the PSI protocol's message parsing. The crash tests run in a child process: before the fix, a
~2 KB frame killed the interpreter with a segmentation fault, which would take pytest down with it.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
import time

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psi.errors import PSIProtocolError
from securevfl.errors import PartyFailure, PeerFinishedError, PeerTimeoutError, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import DEFAULT_RECV_TIMEOUT_S, run_parties
from securevfl.federation.transport import Envelope, InProcessTransport


def nested_tuple_frame(depth: int) -> bytes:
    """A frame of ``depth`` tuple extensions, each holding the next (what an attacker sends)."""
    frame = msgpack.packb([])
    for _ in range(depth):
        frame = msgpack.packb([msgpack.ExtType(4, frame)])
    return frame


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


# ------------------------------------------------------------------ item 1: nested tuple frames


def test_nested_tuple_frame_is_a_protocol_error_not_a_segfault():
    child = run_child("""
        import msgpack
        from securevfl.errors import ProtocolError
        from securevfl.federation import codec
        for depth in (200, 500, 5000):
            frame = msgpack.packb([])
            for _ in range(depth):
                frame = msgpack.packb([msgpack.ExtType(4, frame)])
            try:
                codec.decode(frame)
            except ProtocolError as exc:
                print(depth, len(frame), "ProtocolError", exc)
            else:
                print(depth, "decoded")
    """)
    assert child.returncode == 0, f"decoder died with exit code {child.returncode}: {child.stderr[-500:]}"
    lines = child.stdout.strip().splitlines()
    assert len(lines) == 3 and all("ProtocolError" in line and "nested deeper" in line for line in lines)
    assert int(lines[0].split()[1]) < 2100  # the 2 KB frame of the report


def test_hostile_frame_through_the_runtime_names_the_sender():
    child = run_child("""
        import msgpack
        from securevfl.errors import PartyFailure, ProtocolError
        from securevfl.federation.runtime import run_parties
        from securevfl.federation.transport import Envelope, InProcessTransport

        frame = msgpack.packb([])
        for _ in range(500):
            frame = msgpack.packb([msgpack.ExtType(4, frame)])
        transport = InProcessTransport(["active", "mallory"])

        def active(ctx):
            return ctx.recv("mallory", "splitnn.forward.embedding")

        def mallory(ctx):
            transport.send(Envelope("mallory", "active", "splitnn.forward.embedding", 1, frame))

        try:
            run_parties({"active": active, "mallory": mallory}, active="active", transport=transport)
        except PartyFailure as exc:
            assert isinstance(exc.cause, ProtocolError), exc
            print("failure", exc.party, "|", exc.cause)
    """)
    assert child.returncode == 0, f"receiving process died with exit code {child.returncode}"
    assert child.stdout.startswith("failure active |")
    assert "from mallory" in child.stdout and "splitnn.forward.embedding" in child.stdout


def test_legitimate_nesting_still_round_trips():
    value = {"a": (1, (2, [3, (4, ())]), {"k": (np.arange(3),)}), "b": [(), ((),)]}
    out = codec.decode(codec.encode(value))
    assert out["a"][0] == 1 and out["a"][1] == (2, [3, (4, ())]) and out["b"] == [(), ((),)]
    np.testing.assert_array_equal(out["a"][2]["k"][0], np.arange(3))
    deep: object = 0
    for _ in range(codec.MAX_DEPTH):
        deep = (deep,)
    assert codec.decode(codec.encode(deep)) == deep
    with pytest.raises(ProtocolError, match="nested deeper"):
        codec.decode(codec.encode([deep]))


def test_deep_plain_lists_are_refused_too():
    with pytest.raises(ProtocolError):
        codec.decode(b"\x91" * 100_000 + b"\xc0")  # 100k nested lists: msgpack's own stack limit
    with pytest.raises(ProtocolError, match="nested deeper"):
        codec.decode(b"\x91" * 40 + b"\xc0")


# ------------------------------------------------------------------ item 11: dictionary keys


@pytest.mark.parametrize("frame", [
    msgpack.packb({b"key": 1}, use_bin_type=True),
    msgpack.packb([{"ok": {b"nested": 2}}], use_bin_type=True),
    msgpack.packb([msgpack.ExtType(4, msgpack.packb([{b"in-a-tuple": 3}], use_bin_type=True))], use_bin_type=True),
])
def test_bytes_dictionary_keys_are_refused(frame):
    with pytest.raises(ProtocolError, match="key is not a string"):
        codec.decode(frame)


def _array_ext(header: list, body: bytes = b"") -> msgpack.ExtType:
    packed = msgpack.packb(header)
    return msgpack.ExtType(1, len(packed).to_bytes(4, "little") + packed + body)


@pytest.mark.parametrize("frame, message", [
    # extension -1 is msgpack's timestamp, decoded by msgpack itself (a byte flip in a fuzzed frame made one)
    (msgpack.packb(msgpack.Timestamp(5, 0)), "timestamp"),
    (msgpack.packb([1, {"a": msgpack.Timestamp(1, 2)}]), "timestamp"),
    (msgpack.packb(_array_ext(["float32", [msgpack.Timestamp(1, 0)]], bytes(4))), "shape"),
    (msgpack.packb(_array_ext(["float32", [2.0]], bytes(8))), "shape"),
    (msgpack.packb(_array_ext(["float32", [-1, -2]], bytes(8))), "shape"),
    (msgpack.packb(_array_ext(["float32", 2], bytes(8))), "shape"),
    (msgpack.packb(_array_ext([b"float32", [2]], bytes(8))), "dtype"),
    # 2**124 elements: a product in int64 would wrap round to 0 and match the empty body
    (msgpack.packb(_array_ext(["float32", [2**62, 2**62]])), "length"),
], ids=["timestamp", "nested-timestamp", "timestamp-in-shape", "float-shape", "negative-shape", "int-shape",
        "bytes-dtype", "wrapping-shape"])
def test_values_outside_the_wire_types_are_refused(frame, message):
    with pytest.raises(ProtocolError, match=message):
        codec.decode(frame)


# ------------------------------------------------------------------ item 2: finished and hung peers


def run_bounded(roles, seconds=20.0, **kwargs):
    """Run ``roles`` in a thread; fail the test (instead of hanging it) if the run does not end."""
    box: dict[str, object] = {}

    def target():
        try:
            box["result"] = run_parties(roles, active="active", **kwargs)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    started = time.perf_counter()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the run hung for {seconds} s"
    return box, time.perf_counter() - started


def test_a_role_that_returns_without_sending_fails_the_waiting_peer_at_once():
    def active(ctx):
        ctx.send("p", "x.forward", 1)
        ctx.stage = "epoch 1"
        return ctx.recv("p", "x.backward")

    def passive(ctx):
        ctx.recv("active", "x.forward")  # returns without sending the gradient the active waits for

    box, elapsed = run_bounded({"active": active, "p": passive})
    error = box.get("error")
    assert isinstance(error, PartyFailure) and isinstance(error.cause, PeerFinishedError)
    assert error.party == "active" and error.stage == "epoch 1"
    assert "'x.backward' from p" in str(error.cause) and error.cause.peer == "p"
    assert elapsed < 5


def test_messages_sent_before_finishing_are_still_delivered():
    def active(ctx):
        time.sleep(0.3)  # the passive party has long finished when these are read
        return [ctx.recv("p", "x.value") for _ in range(3)]

    def passive(ctx):
        for i in range(3):
            ctx.send("active", "x.value", i)

    box, _ = run_bounded({"active": active, "p": passive})
    assert box["result"].results["active"] == [0, 1, 2]


def test_a_hung_peer_is_reported_after_the_receive_timeout():
    release = threading.Event()

    def active(ctx):
        return ctx.recv("p", "x.value")

    def passive(ctx):
        release.wait(10)  # stuck, neither sending nor returning

    box, elapsed = run_bounded({"active": active, "p": passive}, recv_timeout=0.5)
    release.set()
    error = box.get("error")
    assert isinstance(error, PartyFailure) and isinstance(error.cause, PeerTimeoutError)
    assert isinstance(error.cause, TimeoutError) and "'x.value' from p" in str(error.cause)
    assert elapsed < 9  # 0.5 s timeout + the abort grace for the stuck party (it never returns)


def test_runs_have_a_receive_timeout_by_default():
    import inspect

    from securevfl import api

    assert DEFAULT_RECV_TIMEOUT_S is not None and math.isfinite(DEFAULT_RECV_TIMEOUT_S)
    assert inspect.signature(run_parties).parameters["recv_timeout"].default == DEFAULT_RECV_TIMEOUT_S
    assert "recv_timeout=None" not in inspect.getsource(api.run)


# ------------------------------------------------------------------ fuzz: the codec

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**200), max_value=2**200)
           | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8))
wire_values = st.recursive(
    scalars | st.builds(np.arange, st.integers(0, 6)),
    lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=10,
)
ALLOWED = (type(None), bool, int, float, str, bytes, list, tuple, dict, np.ndarray, torch.Tensor)


def assert_only_wire_types(value, depth=0):
    assert depth <= codec.MAX_DEPTH + 1
    assert isinstance(value, ALLOWED), type(value)
    if isinstance(value, dict):
        assert all(isinstance(k, str) for k in value)
        for v in value.values():
            assert_only_wire_types(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            assert_only_wire_types(v, depth + 1)


def try_decode(frame):
    try:
        value = codec.decode(frame)
    except ProtocolError:
        return None
    assert_only_wire_types(value)
    return value


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_frames_decode_or_raise_protocol_error(frame):
    try_decode(frame)


@FUZZ
@given(wire_values, st.data())
def test_fuzz_mutated_frames_decode_or_raise_protocol_error(value, data):
    frame = bytearray(codec.encode(value))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame) - 1))
        kind = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if kind == "flip":
            frame[at] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif len(frame) > 1:
            del frame[at]
    try_decode(bytes(frame))


@FUZZ
@given(wire_values, st.data())
def test_fuzz_truncated_or_extended_frames_never_decode(value, data):
    """msgpack is prefix-free: a cut or padded frame is refused, never read as another value."""
    frame = codec.encode(value)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        codec.decode(frame[:cut])
    with pytest.raises(ProtocolError):
        codec.decode(frame + data.draw(st.binary(min_size=1, max_size=8)))


@pytest.mark.slow
@settings(max_examples=20_000, deadline=None)
@given(st.binary(max_size=4096))
def test_fuzz_random_frames_long(frame):
    try_decode(frame)


def test_fuzz_frames_through_the_runtime_never_crash_or_hang():
    """Garbage on a link fails the receiving party with a ProtocolError naming the sender."""
    rng = np.random.default_rng(0)
    frames = [rng.bytes(int(n)) for n in rng.integers(0, 200, size=30)]
    frames += [nested_tuple_frame(d) for d in (40, 300)]
    for frame in frames:
        if try_decode(frame) is not None:
            continue
        transport = InProcessTransport(["active", "mallory"])

        def active(ctx):
            return ctx.recv("mallory", "t.x")

        def mallory(ctx, frame=frame, transport=transport):
            transport.send(Envelope("mallory", "active", "t.x", 1, frame))

        box, _ = run_bounded({"active": active, "mallory": mallory}, seconds=10, transport=transport)
        error = box["error"]
        assert isinstance(error, PartyFailure) and isinstance(error.cause, ProtocolError)
        assert "from mallory" in str(error.cause)


# ------------------------------------------------------------------ fuzz: PSI message parsing


def psi_transcript(x, y):
    from psi.curve import CurveEngine
    from psi.protocol import PSIConfig, PSIInitiator, PSIResponder

    engine = CurveEngine(1)
    init, resp = PSIInitiator(x, PSIConfig(), engine), PSIResponder(y, PSIConfig(), engine)
    return init, resp


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.data())
def test_fuzz_mutated_psi_messages_raise_or_never_match_falsely(step, data):
    """A tampered PSI message is a PSIProtocolError or, at worst, loses matches: it never invents one."""
    x = [f"u{i}" for i in range(12)]
    y = [f"u{i}" for i in range(6, 20)]
    truth = set(x) & set(y)
    init, resp = psi_transcript(x, y)
    receivers = [resp, init, resp, init]  # hello -> responder, reply -> initiator, ...
    message = init.start()
    try:
        for i, party in enumerate(receivers):
            if i == step:
                frame = bytearray(message)
                at = data.draw(st.integers(0, len(frame) - 1))
                frame[at] ^= data.draw(st.integers(1, 255))
                message = bytes(frame)
            message = party.handle(message)
    except PSIProtocolError:  # refused: the session fails, it never completes with what it matched so far
        assert not (init.done and resp.done)
    else:
        assert init.done and resp.done
        for side, ids in ((init, x), (resp, y)):
            if side.outcome.positions is not None:
                assert {ids[i] for i in side.outcome.positions} <= truth
        assert init.outcome.size <= len(truth)


def test_the_receive_timeout_is_an_option_of_the_api_and_the_cli():
    import securevfl
    from securevfl.cli import main
    from securevfl.errors import ConfigError

    with pytest.raises(ConfigError, match="recv_timeout"):
        securevfl.train("splitnn", "breast-cancer", epochs=1, device="cpu", alignment="plaintext", recv_timeout_s=0)
    assert main(["train", "--epochs", "1", "--alignment", "plaintext", "--recv-timeout", "-1", "--quiet",
                 "--device", "cpu"]) == 2
