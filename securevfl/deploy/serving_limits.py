"""What one serving party allows: its endpoint's limits and, at a passive party, its membership budget.

Every party reads its own :class:`ServeSettings` (``securevfl party --serve`` flags): the active
party's endpoint settings bound what an HTTP caller can make it do, and each passive party's budget
bounds how many IDs the active party may look up in its table, whatever the active party asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from securevfl.errors import ConfigError
from securevfl.federation.network import is_loopback_host
from securevfl.settings import check_declared, integer, number, one_of, setting

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
    ``max_connections`` open connections (beyond: the longest-idle one is closed). Each passive
    party has ``party_timeout_s`` to answer its part of a batch (its lookup answer, then its evaluation
    message), else it is left out of that batch (:mod:`securevfl.deploy.serving`).

    Membership budget (a passive party): at most ``ids_per_minute`` looked-up IDs per minute (a
    token bucket of that size refilled continuously) and ``ids_per_session`` in all; 0 means no limit.
    ``serve_ids``: ``all`` (its table's customers) or ``training`` (only those it shared with the
    active party in training, whose membership the training's PSI already showed).
    """

    cert: Path | None = setting(None, flag="--serve-cert", help="With --serve: the endpoint's TLS certificate (PEM).")
    key: Path | None = setting(None, flag="--serve-key", help="With --serve: the endpoint's TLS private key (PEM).")
    client_ca: Path | None = setting(None, cli=False, help="Require client certificates signed by this CA (PEM).")
    token_file: Path | None = setting(
        None, flag="--serve-token-file",
        help="With --serve: require 'Authorization: Bearer <token>', the token read from this file (mode 600).")
    queue_size: int = setting(256, rule=integer(1, 1_000_000),
                              help="With --serve: requests that may wait; beyond, 503 + Retry-After.")
    batch_wait_ms: float = setting(2.0, rule=number(0, 1000),
                                   help="With --serve: requests arriving within this many ms of each other are "
                                        "scored together.")
    max_batch_rows: int = setting(4096, cli=False, rule=integer(1, 1_000_000),
                                  help="The most rows of one batch of requests.")
    client_timeout_s: float = setting(10.0, cli=False, rule=number(0, 3600, open_low=True),
                                      help="Seconds a client has to send its request.")
    request_timeout_s: float = setting(30.0, cli=False, rule=number(0, 3600, open_low=True),
                                       help="Seconds one request may wait for its answer.")
    max_connections: int = setting(1024, cli=False, rule=integer(1, 1_000_000),
                                   help="Open connections; beyond, the longest-idle one is closed.")
    party_timeout_s: float = setting(0.5, flag="--party-timeout", rule=number(0.01, 600),
                                     help="With --serve at the active party: seconds each passive party has to "
                                          "answer its part of a batch (its lookup, then its evaluation message); a "
                                          "party later than that, or down, is left out of the batch.")
    ids_per_minute: int = setting(6000, flag="--max-ids-per-minute", rule=integer(0, 10**12),
                                  help="With --serve at a passive party: the IDs the active party may look up per "
                                       "minute (0: no limit).")
    ids_per_session: int = setting(1_000_000, flag="--max-ids-per-session", rule=integer(0, 10**15),
                                   help="With --serve at a passive party: the IDs it may look up in this session "
                                        "(0: no limit).")
    serve_ids: str = setting("all", rule=one_of(*SERVE_IDS),
                             help="With --serve at a passive party: serve all its customers, or only those it "
                                  "trained on with the active party ('training').")

    def __post_init__(self) -> None:
        check_declared(self)
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
