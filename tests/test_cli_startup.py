"""A command's imports run with the garbage collector paused; only the command's own process freezes them."""

import gc
import subprocess
import sys
import textwrap

import pytest

from securevfl.cli.startup import heavy_imports
from securevfl.errors import ConfigError


def test_the_collector_is_paused_inside_and_back_after_without_a_freeze_in_a_callers_process():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with heavy_imports():
        assert not gc.isenabled()
        with heavy_imports():  # nested: the outer block turns it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), heavy_imports():
        raise ValueError("an import failed")
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen  # securevfl.cli.main called from a program: no freeze


def test_a_collector_turned_off_by_the_caller_stays_off():
    gc.disable()
    try:
        with heavy_imports():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_torch_loads_without_a_full_collection_in_the_commands_own_process_and_is_frozen():
    code = textwrap.dedent("""
        import gc
        from securevfl.cli.startup import heavy_imports, own_process
        full = gc.get_stats()[2]["collections"]
        with own_process():
            with heavy_imports():
                import torch
            print(gc.get_stats()[2]["collections"] - full, gc.get_freeze_count(), gc.isenabled())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    full, frozen, enabled = done.stdout.split()
    assert full == "0" and enabled == "True", done.stdout
    assert int(frozen) > 100_000, done.stdout  # torch's objects sit in the permanent generation


def test_the_light_list_of_method_names_is_the_registry():
    from securevfl.method_names import METHOD_NAMES
    from securevfl.methods import method_names

    assert list(METHOD_NAMES) == method_names()


def test_the_light_lists_of_option_keys_are_each_methods_options():
    import dataclasses

    from securevfl.method_names import METHOD_OPTIONS, check_method_options
    from securevfl.methods import method_names
    from securevfl.methods.base import method_class

    assert {n: tuple(f.name for f in dataclasses.fields(method_class(n).Options)) for n in method_names()} \
        == METHOD_OPTIONS
    check_method_options("easter", {"secagg": "dh", "secagg.key_bits": "3072"})
    with pytest.raises(ConfigError, match=r"unknown option\(s\) bogus, trés for splitnn; valid options: bottom"):
        check_method_options("splitnn", {"bogus": "1", "top": "8", "trés": "2"})
    with pytest.raises(ConfigError, match=r"tres for secureboost \(did you mean trees\?\)"):
        check_method_options("secureboost", {"tres": "5"})
    with pytest.raises(ConfigError, match="valid options: none"):
        check_method_options("local", {"x.y": 1})


@pytest.mark.parametrize("args", [["train", "--model-dir", "{model}", "--quiet"],
                                  ["train", "--method", "nope", "--quiet"],
                                  ["train", "--method", "secureboost", "--option", "tres=5", "--quiet"],
                                  ["train", "--select", "iv>>1", "--quiet"],
                                  ["explore", "--share-stats", "all"],
                                  ["party", "--federation", "{model}/missing.toml", "--as", "bank"]])
def test_a_refused_command_does_not_load_torch(tmp_path, args):
    """Refusals come before the heavy imports (torch, every method): what the user sees in half a second."""
    model = tmp_path / "model" / "bank"
    model.mkdir(parents=True)
    (model / "manifest.json").write_text("{}")  # refused as a part of another securevfl: before any import of torch
    argv = [a.replace("{model}", str(tmp_path / "model")) for a in args]
    code = textwrap.dedent(f"""
        import sys
        from securevfl.cli import main
        code = main({argv!r})
        print(code, "torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], (done.stdout, done.stderr)
