"""Method options are typed: ``Method[OptionsT]`` makes ``self.options.<typo>`` a mypy error."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from securevfl.methods.base import Method, NoOptions, TrainConfig
from securevfl.methods.engine import SplitMethod
from securevfl.methods.splitnn import SplitNN, SplitNNOptions

# Only the method classes matter here: the heavy numeric libraries are skipped (they become Any),
# which keeps a cold mypy run to seconds.
MYPY_INI = """\
[mypy]
follow_imports = silent
ignore_missing_imports = true

[mypy-torch.*,numpy.*,scipy.*,sklearn.*,pandas.*,pyarrow.*,pytorch_tabnet.*]
follow_imports = skip
"""

SNIPPET = """\
from securevfl.methods.base import TrainConfig
from securevfl.methods.splitnn import SplitNN

method = SplitNN(TrainConfig())
bottom: str = method.options.bottom
typo = method.options.botom
"""


def test_mypy_rejects_a_misspelt_option(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
         "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(snippet)],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout + result.stderr
    assert "snippet.py:6:" in errors[0] and '"SplitNNOptions" has no attribute "botom"' in errors[0]


def test_options_class_follows_the_type_argument() -> None:
    class Plain(Method[NoOptions]):
        name = "plain"

        def roles(self, scenario):
            return {}

    assert Plain.Options is NoOptions
    assert SplitNN.Options is SplitNNOptions
    assert isinstance(SplitNN(TrainConfig(options={"bottom": "mlp"})).options, SplitNNOptions)

    @dataclasses.dataclass(frozen=True)
    class Unrelated:
        x: int = 0

    with pytest.raises(TypeError, match="not a subclass of its declared options type SplitNNOptions"):
        class Wrong(SplitMethod[SplitNNOptions]):
            Options = Unrelated
