"""The C extension wire._columns; everything else is declared in pyproject.toml.

wire._columns is no optional accelerator: wire.records builds and decodes every record
batch with it, and there is no pure-Python fallback. So a failed compile stops the
install, with one line saying what is missing rather than only the compiler's output.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, PlatformError


class BuildColumns(build_ext):
    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except (CCompilerError, CompileError, ExecError, PlatformError) as exc:
            raise SystemExit(
                f"sluice: cannot build its C extension {ext.name} ({exc}): it needs a C compiler "
                "and the Python headers (on Debian: apt install gcc python3-dev)") from None


setup(
    ext_modules=[Extension("wire._columns", sources=["wire/_columns.c"], extra_compile_args=["-O2"])],
    cmdclass={"build_ext": BuildColumns},
)
