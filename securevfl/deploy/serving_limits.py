"""What one serving party allows: its endpoint's limits and, at a passive party, its membership budget.

Every party reads its own :class:`ServeSettings` (``securevfl party --serve`` flags): the active
party's endpoint settings bound what an HTTP caller can make it do, and each passive party's budget
bounds how many IDs the active party may look up in its table, whatever the active party asks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from securevfl.errors import ConfigError
from securevfl.federation.network import is_loopback_host

#: Which of its customers a passive party serves.
SERVE_IDS = ("all", "training")


@dataclass(frozen=True)
class ServeSettings:
    """One serving party's settings (each party its own; the flags of ``securevfl party --serve``).

    Endpoint (the active party): ``cert``/``key`` serve HTTPS; ``client_ca`` requires a client
    certificate signed by that CA; ``token_file`` requires ``Authorization: Bearer <token>``. A
    non-loopback ``listen`` needs TLS and one of the two. ``queue_size`` requests may wait (more: 503
    with ``Retry-After``); requests arriving within ``batch_wait_ms`` of each other are scored
    together, up to ``max_batch_rows`` rows; a client must send its request within
    ``client_timeout_s``; ``request_timeout_s`` bounds one request's wait for its answer;
    ``max_connections`` open connections (beyond: the longest-idle one is closed).

    Membership budget (a passive party): at most ``ids_per_minute`` looked-up IDs per minute (a
    token bucket of that size refilled continuously) and ``ids_per_session`` in all; 0 means no limit.
    ``serve_ids``: ``all`` (its table's customers) or ``training`` (only those it shared with the
    active party in training, whose membership the training's PSI already showed).
    """

    cert: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None
    token_file: Path | None = None
    queue_size: int = 256
    batch_wait_ms: float = 2.0
    max_batch_rows: int = 4096
    client_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    max_connections: int = 1024
    ids_per_minute: int = 6000
    ids_per_session: int = 1_000_000
    serve_ids: str = "all"

    def __post_init__(self) -> None:
        for name, low, high in (("queue_size", 1, 1_000_000), ("max_batch_rows", 1, 1_000_000),
                                ("max_connections", 1, 1_000_000), ("ids_per_minute", 0, 10**12),
                                ("ids_per_session", 0, 10**15)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(f"serving setting {name} must be an integer in {low}..{high}, got {value!r}")
        for setting, most in (("batch_wait_ms", 1000.0), ("client_timeout_s", 3600.0),
                           ("request_timeout_s", 3600.0)):
            number = getattr(self, setting)
            if not isinstance(number, (int, float)) or not math.isfinite(number) or not 0 <= number <= most \
                    or (setting != "batch_wait_ms" and number == 0):
                raise ConfigError(f"serving setting {setting} must be a number in (0, {most:g}], got {number!r}")
        if self.serve_ids not in SERVE_IDS:
            raise ConfigError(f"--serve-ids must be one of {', '.join(SERVE_IDS)}, got {self.serve_ids!r}")
        if (self.cert is None) != (self.key is None):
            raise ConfigError("the endpoint's TLS needs both a certificate and its key")

    @property
    def tls(self) -> bool:
        return self.cert is not None

    @property
    def authenticates(self) -> bool:
        return self.client_ca is not None or self.token_file is not None


def check_exposure(host: str, settings: ServeSettings) -> None:
    """A non-loopback endpoint is refused without TLS and client authentication (mutual TLS or a token)."""
    if is_loopback_host(host):
        return
    if not settings.tls or not settings.authenticates:
        raise ConfigError(f"--listen {host}: an endpoint beyond loopback needs TLS (--serve-cert/--serve-key, or "
                          "--serve-tls for this party's federation certificate) and client authentication "
                          "(--serve-client-ca or --serve-token-file)")


class BudgetRefused(Exception):  # noqa: N818 - a refusal, carried to the HTTP answer (429)
    """A passive party refused a lookup: its membership budget is spent."""

    def __init__(self, party: str, reason: str, retry_after_s: float | None):
        super().__init__(f"{party} refused the lookup: {reason}")
        self.party, self.reason, self.retry_after_s = party, reason, retry_after_s


class MembershipBudget:
    """A passive party's allowance of looked-up IDs: a per-minute token bucket and a per-session total.

    ``admit(n)`` takes ``n`` IDs from the allowance, or returns why not (nothing is taken then) with
    the seconds after which the same request would be admitted (``None``: never in this session).
    """

    def __init__(self, per_minute: int, per_session: int, clock: Callable[[], float] = time.monotonic):
        self.per_minute, self.per_session, self._clock = per_minute, per_session, clock
        self.used = 0
        self._tokens = float(per_minute)
        self._at = clock()

    def admit(self, n: int) -> tuple[str, float | None] | None:
        """None when ``n`` IDs are admitted (and counted); else (reason, retry-after seconds or None)."""
        if self.per_session and self.used + n > self.per_session:
            return f"its budget of {self.per_session} IDs per session is spent", None
        if self.per_minute:
            now = self._clock()
            rate = self.per_minute / 60.0
            self._tokens = min(float(self.per_minute), self._tokens + (now - self._at) * rate)
            self._at = now
            if n > self.per_minute:
                return f"a lookup of {n} IDs exceeds its budget of {self.per_minute} IDs per minute", None
            if n > self._tokens:
                return f"its budget of {self.per_minute} IDs per minute is spent", (n - self._tokens) / rate
            self._tokens -= n
        self.used += n
        return None
