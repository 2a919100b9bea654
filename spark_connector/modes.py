"""The save and output modes that PySpark settles before a Python data source hears of a write.

Spark's Kafka sink refuses the batch save modes Overwrite and Ignore, takes the default,
ErrorIfExists, as Append, and appends the rows a streaming query in Update mode
updates. PySpark 4.3 tells a Python data source only whether a write overwrites (its
write builder supports truncation and nothing else, not SupportsStreamingUpdateAsAppend):
the JVM itself refuses ErrorIfExists and Ignore at save(), and Update once the query has
started, without calling the data source. So `register()` wraps the save() of PySpark's
DataFrameWriter and the start() of its DataStreamWriter, for `format("sluice")` only: a
write in ErrorIfExists mode is saved in Append mode, as Spark's Kafka sink treats it, and
a stream in Update mode is refused by start(), before any query runs, saying what to use
instead. Every other format and mode is left to PySpark unchanged; Overwrite reaches the
data source, which refuses it (`SluiceDataSource.writer`), Ignore stays refused by Spark,
and Complete reaches it as `overwrite` and is appended, as by Spark's Kafka sink (whose
truncation does nothing).
"""

from __future__ import annotations

import functools
import inspect

from spark_connector.options import SluiceOptionError

_NAME = "sluice"
_ERROR_IF_EXISTS = (None, "error", "errorifexists", "default")  # PySpark's names for it
_UPDATE_REFUSED = (
    'output mode Update is not supported by format("sluice"): PySpark gives a Python data source '
    "no way to declare that it writes updated rows as appends, as Spark's Kafka sink does. Use "
    'outputMode("complete") (every trigger writes the whole result table) or, with a watermark on '
    'the aggregation, outputMode("append") (each row once, when it is final)')


def install(spark) -> None:
    """Wrap the writers of `spark`'s kind of session (classic or Spark Connect), once."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.readwriter import DataFrameWriter
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter
    else:
        from pyspark.sql.readwriter import DataFrameWriter
        from pyspark.sql.streaming.readwriter import DataStreamWriter
    if getattr(DataFrameWriter, "_sluice_modes", False):
        return
    for cls, mode, run, decide in ((DataFrameWriter, "mode", "save", _save_mode),
                                   (DataStreamWriter, "outputMode", "start", _output_mode)):
        _remember(cls, "format", "_sluice_format")
        _remember(cls, mode, "_sluice_mode")
        _for_sluice(cls, run, mode, decide)
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


def _output_mode(bound, mode: str | None) -> None:
    if mode == "update":
        raise SluiceOptionError(_UPDATE_REFUSED)
