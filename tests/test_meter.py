import pytest

from securevfl.errors import ConfigError
from securevfl.federation.meter import Meter, MeterSnapshot, NetworkModel, link_transfer_seconds


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_exclusive_attribution_of_nested_time():
    clock = FakeClock()
    m = Meter("a", clock=clock)
    with m.compute():
        clock.t += 1.0
        with m.crypto("secagg.mask"):
            clock.t += 0.25
        clock.t += 0.5
    with m.serialize():
        clock.t += 0.125
    snap = m.snapshot()
    assert snap.compute_s == pytest.approx(1.5)
    assert snap.crypto_s == {"secagg.mask": pytest.approx(0.25)}
    assert snap.serialize_s == pytest.approx(0.125)


def test_synchronize_called_around_compute():
    calls = []
    m = Meter("a", synchronize=lambda: calls.append(1))
    with m.compute():
        pass
    with m.crypto("x"):
        pass
    assert len(calls) == 2


def test_messages_rounds_and_network_model():
    m = Meter("a")
    m.record_message("a", "b", 1000, depth=1)
    m.record_message("a", "c", 3000, depth=1)
    m.record_message("a", "b", 500, depth=2)
    snap = m.snapshot()
    assert snap.bytes == {"a->b": 1500, "a->c": 3000}
    assert snap.messages == {"a->b": 2, "a->c": 1}
    assert snap.rounds == 2
    net = NetworkModel(bandwidth_mbps=8.0, latency_ms=10.0)  # 1 byte per microsecond
    # depth 1: latency + max(1000, 3000) bytes; depth 2: latency + 500 bytes
    assert net.transfer_seconds(snap.depth_link_bytes) == pytest.approx(0.02 + 3000e-6 + 500e-6)


def test_per_link_network_model_takes_each_levels_slowest_link():
    levels = {1: {"a->b": 1000, "a->c": 3000}, 2: {"b->a": 500}}
    fast = NetworkModel(bandwidth_mbps=8.0, latency_ms=10.0)  # 1 byte per microsecond
    # the same model on every link: the uniform formula
    assert link_transfer_seconds(levels, {}, fast) == pytest.approx(fast.transfer_seconds(levels))
    slow = NetworkModel(bandwidth_mbps=0.8, latency_ms=100.0)  # 10 us per byte
    # a slow a->b: level 1 costs max(0.1 + 0.01, 0.01 + 0.003); level 2 stays fast
    got = link_transfer_seconds(levels, {"a->b": slow}, fast)
    assert got == pytest.approx(0.1 + 1000e-5 + 0.01 + 500e-6)


def test_merge_and_validation():
    a = MeterSnapshot(seconds={"compute": 1.0}, bytes={"x->y": 2}, messages={"x->y": 1},
                      depth_link_bytes={1: {"x->y": 2}})
    b = MeterSnapshot(seconds={"compute": 2.0}, bytes={"x->y": 3}, messages={"x->y": 1},
                      depth_link_bytes={1: {"x->y": 3}})
    c = a.merged(b)
    assert c.compute_s == 3.0 and c.bytes == {"x->y": 5} and c.depth_link_bytes == {1: {"x->y": 5}}
    with pytest.raises(ConfigError):
        NetworkModel(bandwidth_mbps=0)
