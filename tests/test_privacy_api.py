import subprocess
import sys

import securevfl.privacy as privacy


def test_import_is_light():
    code = (
        "import sys, securevfl.privacy; "
        "print(any(m in sys.modules for m in ('torch', 'numpy', 'cryptography', 'gmpy2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_lazy_exports_resolve():
    for name in privacy.__all__:
        assert getattr(privacy, name) is not None
    assert "simulate_secagg" in dir(privacy)
