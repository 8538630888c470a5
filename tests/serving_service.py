"""Every party of a served model in threads of the test process, and an HTTP client of its endpoint."""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from deployed_threads import one_torch_thread
from org_tables import organisation_frames, write_tables

import securevfl
from securevfl.deploy.serving_limits import ServeSettings
from securevfl.pipeline.serve import run_serving_party

PARTIES = ("bank", "shop", "clinic")


def train_served_model(out: Path) -> tuple[Path, dict[str, Path]]:
    """A SplitNN model trained in one process on the organisations' tables, and every party's table.

    Trained on the rows every party holds (``require_all_parties``): these tests serve the intersection;
    tests/test_coverage.py and tests/test_serving_outage.py serve a model trained on every row.
    """
    files = write_tables(organisation_frames(7, keep=0.9, categories={"bank": "tier"}), out)
    model = out / "model"
    securevfl.train("splitnn", data_files={p: str(files[p]) for p in PARTIES}, id_column="customer_id",
                    label_column="churn", epochs=2, batch_size=64, seed=0, device="cpu", model_dir=model,
                    require_all_parties=True)
    return model, files


#: The active party's deadline for each passive party here, unless a test sets another: every party runs in a
#: thread of the test process (one GIL), where a fraction of a second measures the machine's load, not a peer.
IN_THREADS_PARTY_TIMEOUT_S = 30.0


class Service:
    """Every party's ``run_serving_party`` in a thread; ``url`` once the active party is ready.

    The active party's ``party_timeout_s``, left at its default, is :data:`IN_THREADS_PARTY_TIMEOUT_S`.
    """

    def __init__(self, federation: Any, model: Path, files: dict[str, Path],
                 parties: tuple[str, ...] | None = None, settings: dict[str, Any] | None = None) -> None:
        settings = dict(settings or {})
        active = settings.get(federation.active) or ServeSettings()
        if active.party_timeout_s == ServeSettings().party_timeout_s:
            settings[federation.active] = dataclasses.replace(active, party_timeout_s=IN_THREADS_PARTY_TIMEOUT_S)
        self.federation = federation
        self.stop, self.ready = threading.Event(), threading.Event()
        self.url = ""
        self.results: dict[str, Any] = {}
        self.errors: dict[str, BaseException] = {}

        def on_ready(url: str) -> None:
            self.url = url
            self.ready.set()

        def run(party: str) -> None:
            try:
                with one_torch_thread():
                    self.results[party] = run_serving_party(
                        federation, party, files.get(party), model if party in files else None,
                        listen="127.0.0.1:0", device="cpu",
                        on_ready=on_ready if party == federation.active else None,
                        stop=self.stop if party == federation.active else None,
                        settings=(settings or {}).get(party))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.errors[party] = exc
                self.ready.set()

        self.threads = [threading.Thread(target=run, args=(p,), daemon=True)
                        for p in (parties or tuple(federation.parties))]
        for t in self.threads:
            t.start()
        ready = self.ready.wait(60)
        assert ready and not self.errors, {p: getattr(e, "traceback_text", e) for p, e in self.errors.items()}

    def post(self, body: Any, headers: dict[str, str] | None = None, context: Any = None) -> tuple[int, dict[str, Any]]:
        status, _, answer = self.request("/score", body, headers, context)
        return status, answer

    def request(self, path: str, body: Any = None, headers: dict[str, str] | None = None,
                context: Any = None) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON answer or text) of a POST (``body``) or GET to ``path``."""
        data = None if body is None else json.dumps(body).encode() if not isinstance(body, bytes) else body
        request = urllib.request.Request(f"{self.url}{path}", data=data, method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, dict(response.headers), _decoded(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), _decoded(exc.read())

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        assert not any(t.is_alive() for t in self.threads)
        assert not self.errors, self.errors




def _decoded(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode()
