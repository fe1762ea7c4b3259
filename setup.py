"""The one thing pyproject.toml cannot say without an experimental table: the processor's native cut
of trace requests by trace id (``otel_blame/processor/_wire.c``; ``otel_blame/processor/wire.py``
says why). Optional: where no C compiler is at hand the package installs, and the same cut runs in
Python."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "otel_blame.processor._wire",
            sources=["otel_blame/processor/_wire.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
