"""The connector's errors reach the user message first.

PySpark reports an exception raised in a Python data source as the traceback its
worker formats: the Spark error reads "[PYTHON_DATA_SOURCE_ERROR] Failed to ...:
Traceback (most recent call last):", and the message comes 10-20 lines further down.
The worker prints only the exception's own lines (type, message, notes) when
SPARK_HIDE_TRACEBACK is in its environment, which it looks up as it formats the
exception (`spark.sql.execution.pyspark.udf.hideTraceback.enabled` sets it for every
worker). So each entry point that PySpark calls sets it in the worker that is about
to report the entry point's error, and adds the traceback to the exception as a note,
printed after the message: the first line names the problem, the traceback stays below
it. Every PySpark worker exits once it has reported an error, so the setting ends with
it. Python 3.10 prints no notes: there the traceback is left to PySpark, first.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
import types

_HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"
_NOTED = "_sluice_traceback_noted"


def _message_first(exc: Exception) -> None:
    if sys.version_info < (3, 11) or getattr(exc, _NOTED, False):
        return
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # from the entry point on, not this module's
    exc.add_note("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)).rstrip())
    setattr(exc, _NOTED, True)
    os.environ[_HIDE_TRACEBACK] = "1"


def _reporting(method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            result = method(*args, **kwargs)
        except Exception as exc:
            _message_first(exc)
            raise
        return _reporting_iteration(result) if isinstance(result, types.GeneratorType) else result
    return call


def _reporting_iteration(generator):
    """A task's rows: the errors come while PySpark iterates, after read() returned."""
    try:
        yield from generator
    except Exception as exc:
        _message_first(exc)
        raise


def message_first(cls):
    """Class decorator: the public methods of `cls` (those PySpark calls) report their
    errors message first."""
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and isinstance(value, types.FunctionType):
            setattr(cls, name, _reporting(value))
    return cls
