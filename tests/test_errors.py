"""Every error zagg raises on purpose is a ZaggError, so the command line prints it as one
line naming the fix (exit status 2) whichever stage raised it."""

import importlib
import pkgutil
import subprocess
import sys

import zagg
from zagg.errors import ZaggError

# modules that need an optional extra this environment may lack are skipped, not failed
OPTIONAL = ("zagg.read.plot",)


def zagg_modules():
    for info in pkgutil.walk_packages(zagg.__path__, "zagg."):
        if info.name.endswith("__main__") or info.name in OPTIONAL:
            continue
        yield importlib.import_module(info.name)


def test_every_exception_class_of_zagg_derives_from_zagg_error():
    found = {}
    for module in zagg_modules():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and not issubclass(value, Warning)  # warnings say something, they stop nothing
                and value.__module__.startswith("zagg.")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    assert "zagg.checks.validation.ConfigError" in found  # the walk sees the stages
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, ZaggError))
    assert outside == []


def test_zagg_errors_keep_the_builtin_they_always_were():
    from zagg import ConfigError

    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, ZaggError)


def test_the_command_line_prints_any_zagg_error_as_one_line(tmp_path):
    # a store whose manifest is not JSON: refused by the store layer (a ZaggError)
    store = tmp_path / "s"
    store.mkdir()
    (store / "morton_hive.json").write_text("{")
    result = subprocess.run(
        [sys.executable, "-m", "zagg", "inspect", str(store)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith("zagg: error: ") and result.stderr.count("\n") == 1
    assert "its manifest is unusable" in result.stderr and "Traceback" not in result.stderr
