"""Deployed parties in threads of one test process: a loopback federation file and a run of every party."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from net_helpers import free_port

#: The ``[job]`` body most process tests run: SplitNN on the organisations' tables (tests/org_tables.py).
SPLITNN_JOB = ('method = "splitnn"\nepochs = 2\nbatch_size = 64\nseed = 0\n'
               'id_column = "customer_id"\nlabel_column = "churn"')


def loopback_federation_file(directory: Path, parties: Sequence[str], active: str, job: str, extra: str = "", *,
                             network: str = "peer_timeout_s = 20\nheartbeat_s = 0.5",
                             name: str = "fed.toml") -> Path:
    """A plaintext loopback federation file of ``parties`` on free ports.

    ``job``: the ``[job]`` table's body; ``network``: the ``[network]`` table's body; ``extra``: more
    tables (``[job.options]``, a party's columns).
    """
    addresses = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{free_port()}"' for p in parties)
    path = directory / name
    path.write_text(f'[federation]\nactive = "{active}"\ninsecure = true\n\n{addresses}\n\n{extra}\n\n'
                    f"[network]\n{network}\n\n[job]\n{job}\n")
    return path


def loopback_federation(tmp_path: Path, parties: list[str], active: str, job: str, extra: str = "") -> Any:
    """:func:`loopback_federation_file`, loaded."""
    from securevfl.deploy.federation_file import load_federation

    return load_federation(loopback_federation_file(tmp_path, parties, active, job, extra))


def in_threads(run: Any, parties: Sequence[str], timeout: float = 120) -> dict[str, Any]:
    """``run(party)`` for every party in a thread of its own; a party's exception fails the caller."""
    results, errors = {}, {}

    def one(party: str) -> None:
        try:
            results[party] = run(party)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[party] = exc

    threads = [threading.Thread(target=one, args=(p,)) for p in parties]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, errors
    assert set(results) == set(parties), "a party did not finish"
    return results


def run_parties_in_threads(federation: Any, files: dict[str, str | None], timeout: float = 120,
                           **options: Any) -> dict[str, Any]:
    """Every party's ``run_deployed_party`` result; a party's exception fails the caller.

    ``files``: party -> its table (``None`` for a ``data = false`` party); ``options``: more
    ``run_deployed_party`` arguments for every party (``model_dir=...``).
    """
    from securevfl.pipeline.train import run_deployed_party

    return in_threads(lambda p: run_deployed_party(federation, p, files[p], device="cpu", **options), tuple(files),
                      timeout)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Results depend on torch's thread count (float summation order): compare runs at one thread each,
    as ``launch`` gives every party process on a 2-core machine (OMP_NUM_THREADS = cores // parties)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
