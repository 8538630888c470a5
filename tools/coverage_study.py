"""A quick study of partial coverage on organisation tables: train, then score every row, per pattern.

    PYTHONPATH=. .venv/bin/python tools/coverage_study.py [--keep 0.8] [--epochs 30] [--dropout 0.1]

Breast Cancer Wisconsin cut over three organisations (tests/org_tables.py), each passive party holding
a row with probability ``--keep``; trains SplitNN on every row (``require_all_parties=False``) and on the rows
every party holds (the default), then prints the held-out metrics per coverage pattern.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import securevfl  # noqa: E402
from org_tables import organisation_frames, write_tables  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=float, default=0.8)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        frames = organisation_frames(args.seed, keep=args.keep)
        frames["bank"] = organisation_frames(args.seed, keep=1.0)["bank"]  # the active party holds every row
        files = write_tables(frames, Path(work))
        common = dict(data_files={p: str(f) for p, f in files.items()}, id_column="customer_id",
                      label_column="churn", epochs=args.epochs, device="cpu", seed=args.seed)
        for label, extra in (("every row", {"require_all_parties": False, "party_dropout": args.dropout}),
                             ("every party only", {}),
                             ("local", {})):
            method = "local" if label == "local" else "splitnn"
            report = securevfl.train(method, **common, **extra)
            print(f"{label}: auc {report.metrics.get('auc', float('nan')):.4f} on {len(report.test_predictions['ids'])} rows")
            for pattern, entry in report.metrics.get("coverage", {}).items():
                print(f"    {pattern:22s} rows {entry['rows']:4d}  auc {entry.get('auc', float('nan')):.4f}  "
                      f"accuracy {entry['accuracy']:.4f}")


if __name__ == "__main__":
    main()
