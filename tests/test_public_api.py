import importlib
import subprocess
import sys

import securevfl


def test_every_name_in_all_imports():
    for name in securevfl.__all__:
        assert getattr(securevfl, name) is not None, name
    for module in ("securevfl.data", "securevfl.methods", "securevfl.errors", "securevfl.deploy"):
        mod = importlib.import_module(module)
        for name in mod.__all__:
            assert hasattr(mod, name), f"{module}.{name}"


def test_errors_share_one_root_and_builtins():
    from securevfl.errors import ConfigError, DataError, SecureVFLError

    assert issubclass(ConfigError, ValueError) and issubclass(DataError, SecureVFLError)


def test_psi_and_errors_do_not_import_torch():
    code = "import psi, securevfl.errors, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
