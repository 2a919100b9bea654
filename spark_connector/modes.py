"""The save modes that PySpark settles before a Python data source hears of a write.

Spark's Kafka sink refuses the batch save modes Overwrite and Ignore and takes the
default, ErrorIfExists, as Append. PySpark 4.3 tells a Python data source only whether a
write overwrites (its write builder supports truncation and nothing else): the JVM
itself refuses ErrorIfExists and Ignore at save(), without calling the data source. So
`register()` wraps the save() of PySpark's DataFrameWriter, for `format("sluice")` only:
a write in ErrorIfExists mode is saved in Append mode, as Spark's Kafka sink treats it.
Every other format and mode is left to PySpark unchanged; Overwrite reaches the data
source, which refuses it (`SluiceDataSource.writer`), and Ignore stays refused by Spark.
"""

from __future__ import annotations

import functools
import inspect

_NAME = "sluice"
_ERROR_IF_EXISTS = (None, "error", "errorifexists", "default")  # PySpark's names for it


def install(spark) -> None:
    """Wrap the writers of `spark`'s kind of session (classic or Spark Connect), once."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.readwriter import DataFrameWriter
    else:
        from pyspark.sql.readwriter import DataFrameWriter
    if getattr(DataFrameWriter, "_sluice_modes", False):
        return
    _remember(DataFrameWriter, "format", "_sluice_format")
    _remember(DataFrameWriter, "mode", "_sluice_mode")
    _for_sluice(DataFrameWriter, "save", "mode", _save_mode)
    DataFrameWriter._sluice_modes = True


def _remember(cls, method: str, attribute: str) -> None:
    """Keep the last value given to `method` on the writer, lowercased."""
    original = getattr(cls, method)

    @functools.wraps(original)
    def remembering(self, value, *args, **kwargs):
        if value is not None:
            setattr(self, attribute, value.lower())
        return original(self, value, *args, **kwargs)

    setattr(cls, method, remembering)


def _for_sluice(cls, method: str, mode: str, decide) -> None:
    """Let `decide(bound arguments, mode)` see a format("sluice") writer's `method` call
    first, with the format and mode its arguments or the writer's earlier calls chose."""
    original = getattr(cls, method)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def checked(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        if (bound.arguments.get("format") or getattr(self, "_sluice_format", "")).lower() == _NAME:
            chosen = bound.arguments.get(mode) or getattr(self, "_sluice_mode", None)
            decide(bound, chosen.lower() if chosen else None)
        return original(*bound.args, **bound.kwargs)

    setattr(cls, method, checked)


def _save_mode(bound, mode: str | None) -> None:
    if mode in _ERROR_IF_EXISTS:
        bound.arguments["mode"] = "append"
