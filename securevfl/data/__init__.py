"""Data layer: dataset registry, vertical partitioner, each party's own preprocessing, and scenarios."""

from securevfl.data.columns import ColumnSpec
from securevfl.data.datasets import (
    Dataset,
    DatasetOptions,
    dataset_names,
    describe_datasets,
    load_dataset,
    register_dataset,
)
from securevfl.data.partition import PartitionSpec, PartyTable, partition, register_preset
from securevfl.data.scenario import (
    Alignment,
    PartyData,
    Scenario,
    align_plaintext,
    scenario_from_partition,
    scenario_from_tables,
)

__all__ = [
    "Alignment", "ColumnSpec", "Dataset", "DatasetOptions", "PartitionSpec", "PartyData", "PartyTable", "Scenario",
    "align_plaintext", "dataset_names", "describe_datasets", "load_dataset", "partition",
    "register_dataset", "register_preset", "scenario_from_partition", "scenario_from_tables",
]
