"""Online scoring as a mode of the pipeline: one party per process, up until stopped (``party --serve``).

What the parties exchange and what each learns is :mod:`securevfl.deploy.serving`'s (an ID index
per passive party once, a blinded lookup per batch of requests); the endpoint, its limits and its
metrics are :mod:`securevfl.deploy.serving_http`'s. Here the run is assembled as every other:
everything local first (the part, the table, the endpoint bound: a port in use fails before
connecting), then the links, then the party's serving role until the service stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.deploy.federation_file import Federation
from securevfl.deploy.progress import log_event
from securevfl.deploy.serving import (
    DEFAULT_LISTEN,
    IDLE_STAGE,
    ServingModel,
    ServingSummary,
    helper_model,
    helper_role,
    listen_address,
    load_serving_model,
    only_training_ids,
    passive_role,
    prepare_job,
    serving_scenario,
)
from securevfl.deploy.serving_active import active_role
from securevfl.deploy.serving_http import (
    RequestQueue,
    ScoringApp,
    ScoringEndpoint,
    ScoringJob,
    ServeMetrics,
    ServiceStopped,
    read_token,
)
from securevfl.deploy.serving_limits import ServeSettings, check_exposure
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError, Interrupted
from securevfl.pipeline.placement import Deployed, InProcess, OneParty, Outcome

_log = logging.getLogger("securevfl.deploy.serving")


@dataclass
class _Serving:
    """What this party brings to a serving session, checked (and its endpoint bound) before connecting."""

    model: ServingModel
    method: Any
    seed: int
    table: Any = None
    classes: tuple[str, ...] = ()
    task: str = ""
    fingerprint: str = ""
    standalone: bool = False
    jobs: RequestQueue | None = None
    endpoint: ScoringEndpoint | None = None
    token: bytes | None = None
    metrics: ServeMetrics = field(default_factory=ServeMetrics)
    state: dict[str, str] = field(default_factory=lambda: {"status": "starting"})


@dataclass
class ServeRun:
    """Serve this party's part of the model under ``model_dir`` for the customers of ``data``.

    ``listen``: the active party's endpoint; ``on_ready(url)``: called at the active party once every
    peer is up and the endpoint listens; ``stop``: set to stop the service (else SIGINT / SIGTERM);
    ``settings``: this party's own (the active party's endpoint; a passive party's membership budget).
    """

    model_dir: str | Path | None
    data: str | Path | None
    listen: str = DEFAULT_LISTEN
    on_ready: Callable[[str], None] | None = None
    stop: threading.Event | None = None
    settings: ServeSettings = field(default_factory=ServeSettings)
    phase = "serve"

    def prepare(self, session: InProcess | Deployed) -> _Serving:
        if not isinstance(session, Deployed):
            raise ConfigError("serving runs one party per process: securevfl party --serve (or launch --serve)")
        federation, name, settings = session.federation, session.name, self.settings
        standalone = session.placement.standalone
        if standalone and session.kind != "active":
            raise ConfigError(f"the {federation.job.method} model is the active party's alone: only "
                              f"{federation.active} serves (no other party needed)")
        host, port = listen_address(self.listen) if session.kind == "active" else ("", 0)
        if session.kind == "active":
            check_exposure(host, settings)
        token = read_token(settings.token_file) if session.kind == "active" and settings.token_file else None
        if session.kind == "helper":
            model, method, config, table = helper_model(federation, name, self.data)
            log_event(_log, name, "start", "model", "serving with no part (a helper)")
            local = _Serving(model, method, config.seed, standalone=standalone)
        elif self.data is None or self.model_dir is None:
            raise ConfigError(f"{name} serves with its own part and its table: give --model-dir and --data")
        else:
            log_event(_log, name, "start", "model", f"serving with {self.model_dir}/{name}")
            model, method, config, table = load_serving_model(federation, name, self.data, self.model_dir, standalone)
            if settings.serve_ids == "training" and session.kind == "passive":
                model = only_training_ids(model, name)
            manifest = model.part.manifest
            local = _Serving(model, method, config.seed, table, tuple(manifest.classes), manifest.task,
                             manifest.job_fingerprint, standalone)
        if session.kind == "active":
            local.token = token
            local.jobs = RequestQueue(settings.queue_size)
            app = ScoringApp(name, self._preparer(local, federation), self._submitter(local),
                             lambda: local.state["status"], local.metrics, settings, token)
            local.endpoint = ScoringEndpoint(app, host, port, settings)  # bound now: a port in use fails here
        return local

    @staticmethod
    def _preparer(local: _Serving, federation: Federation) -> Callable[[list[dict[str, Any]]], ScoringJob]:
        own = {item: i for i, item in enumerate(local.model.ids)}
        job = federation.job
        return lambda rows: prepare_job(local.model, rows, job.id_column, job.psi.normalize, own)

    @staticmethod
    def _submitter(local: _Serving) -> Callable[[ScoringJob], None]:
        def submit(job: ScoringJob) -> None:
            if local.state["status"] != "ok":
                raise ServiceStopped(f"the scoring service is {local.state['status']}")
            assert local.jobs is not None
            local.jobs.put(job)
            local.metrics.queued.set(local.jobs.qsize())

        return submit

    def connect(self, session: InProcess | Deployed, local: _Serving) -> Any:
        """The endpoint (it closes last, whatever failed), then the party's links (a standalone model: none)."""
        assert isinstance(session, Deployed)
        stack = ExitStack()
        if local.endpoint is not None:
            stack.enter_context(local.endpoint)
        stack.enter_context(session.connect("serve", len(local.model.ids) if local.table is not None else None,
                                            links=not local.standalone, quiet_stages=(IDLE_STAGE,)))
        return stack

    def setup(self, session: InProcess | Deployed, local: _Serving) -> None:
        """Nothing before the roles: a serving party exchanges its ID index inside its role, once."""

    def execute(self, session: InProcess | Deployed, local: _Serving, scenario: None) -> Outcome:
        assert isinstance(session, Deployed)
        role = self._role(session, local)
        federation = session.federation
        parties = (federation.active,) if local.standalone else session.parties
        passives = () if local.standalone else session.data_parties[1:]
        try:
            return session.execute({session.name: role}, seed=local.seed, stage="serve", costs=False, check=False,
                                   parties=parties, passives=passives)
        except BaseException as exc:
            if session.kind == "active" and not isinstance(exc, (Interrupted, KeyboardInterrupt)):
                log_event(_log, session.name, "serve", "outage", f"the scoring service stops: {type(exc).__name__}",
                          level=logging.ERROR, error=type(exc).__name__)
            raise
        finally:
            local.state["status"] = "stopped"
            if local.jobs is not None:
                local.jobs.drain()

    def _role(self, session: Deployed, local: _Serving) -> Any:
        federation, name = session.federation, session.name

        def build_side(widths: Mapping[str, int], n_classes: int, model_task: str) -> Any:
            """The party's scoring side, for a scenario of no rows with every party's encoded width."""
            from securevfl.data.preprocess import EncodedColumns

            scenario = serving_scenario(federation, name, local.table, local.classes, model_task, widths, n_classes)
            if local.table is not None:
                model = local.model
                names = model.encoder.feature_names if model.encoder is not None else ()
                scenario.remember_encoding(name, EncodedColumns(model.X[:0], tuple(names), {}, model.encoder))
            return local.method.scoring_roles(scenario)[name].side

        if session.kind == "helper":
            return helper_role(local.model, build_side)
        if session.kind == "passive":
            return passive_role(local.model, local.fingerprint, build_side, self.settings)
        assert local.endpoint is not None and local.jobs is not None
        local.endpoint.start()
        address = local.endpoint.url
        settings, token, on_ready = self.settings, local.token, self.on_ready

        def ready() -> None:
            local.state["status"] = "ok"
            log_event(_log, name, "serve", "ready", f"serving at {address}/score", url=f"{address}/score",
                      tls=settings.tls, authentication="token" if token else
                      "client certificate" if settings.client_ca else "none")
            if on_ready:
                on_ready(address)

        if self.stop is not None:
            stop, jobs = self.stop, local.jobs

            def stop_when_told() -> None:
                stop.wait()
                local.state["status"] = "stopping"
                jobs.stop()

            threading.Thread(target=stop_when_told, daemon=True).start()
        return active_role(local.model, local.fingerprint, local.jobs, federation, local.classes, local.task,
                           build_side, ready, idle_s=max(0.5, federation.limits.recv_timeout_s / 4),
                           settings=settings, metrics=local.metrics)

    def finish(self, session: InProcess | Deployed, local: _Serving, scenario: None,
               outcome: Outcome) -> ServingSummary:
        summary: ServingSummary = outcome.value
        if local.endpoint is not None:
            summary.address = local.endpoint.url
        return summary

    def done(self, session: InProcess | Deployed, summary: ServingSummary) -> ServingSummary:
        assert isinstance(session, Deployed)
        timing, latency = "", {}
        if summary.latencies_ms:
            p50, p99 = np.percentile(summary.latencies_ms, [50, 99])
            timing, latency = f"; latency p50 {p50:.1f} ms, p99 {p99:.1f} ms", {"p50_ms": p50, "p99_ms": p99}
        summary.wall_s = session.done(f"stopped: {summary.requests} requests, {summary.rows_scored} rows scored"
                                      f"{timing}", summary.rows_scored, requests=summary.requests, **latency)
        return summary


def run_serving_party(federation: Federation, name: str, data: str | Path | None, model_dir: str | Path | None, *,
                      listen: str = DEFAULT_LISTEN, device: str = "auto", transport: Any = None,
                      on_ready: Callable[[str], None] | None = None, stop: threading.Event | None = None,
                      settings: ServeSettings | None = None,
                      threads: int | ThreadChoice | None = None) -> ServingSummary:
    """Serve party ``name``'s part of the model under ``model_dir`` until stopped (``stop``, SIGINT or SIGTERM).

    A helper (``data = false``: hetero-lr's arbiter) takes no ``data`` and no ``model_dir``: it holds
    no part, and takes its part in each request (the arbiter: fresh keys, masked decryptions).
    ``threads``: torch's threads in this process, as for training.
    """
    from securevfl.pipeline import run

    mode = ServeRun(model_dir, data, listen, on_ready, stop, settings or ServeSettings())
    return run(mode, OneParty(federation, name, device, None, transport, threads))


__all__ = ["ServeRun", "run_serving_party"]
