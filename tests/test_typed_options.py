"""Method options are typed: ``Method[OptionsT]`` makes ``self.options.<typo>`` a mypy error."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from securevfl.methods.base import Method, NoOptions, TrainConfig
from securevfl.methods.engine import SplitMethod
from securevfl.methods.splitnn import SplitNN, SplitNNOptions

SNIPPET = """\
from securevfl.methods.base import TrainConfig
from securevfl.methods.splitnn import SplitNN

method = SplitNN(TrainConfig())
bottom: str = method.options.bottom
typo = method.options.botom
"""


def test_mypy_rejects_a_misspelt_option(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    # the project's configuration and cache: ``make test`` has just run mypy, so this takes 2 s (18 s with
    # a cache of its own); run alone on a fresh clone it fills the project's cache first
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(snippet)],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=600,
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
