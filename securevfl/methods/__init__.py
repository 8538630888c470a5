"""Training methods, registered by name.

Importing this package imports every module in it, and each module registers its methods with
:func:`register_method` — so a new method is one new file, with no list to edit.
"""

from importlib import import_module
from pkgutil import iter_modules

from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    TrainConfig,
    create_method,
    method_class,
    method_names,
    register_method,
    with_method_defaults,
)

for _module in iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        import_module(f"{__name__}.{_module.name}")

__all__ = ["ActiveOutcome", "Method", "TrainConfig", "create_method", "method_class", "method_names",
           "register_method", "with_method_defaults"]
