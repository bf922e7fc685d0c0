"""A command's start-up: loading the modules, the app and the engines before its own work begins.

Loading the pipeline, the store and a model SDK allocates a few hundred thousand objects, nearly all
of which (modules, classes, functions, schemas) live as long as the process. Python's cyclic garbage
collector walks them again and again while they are made, once more in every later full collection,
and a last time when the interpreter exits. Measured on a cold one-turn `yao-agent chat`, those walks
were over a quarter of its CPU, two thirds of that at exit.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Generator


@contextlib.contextmanager
def loading() -> Generator[None]:
    """Hold the cyclic collector while start-up builds what lives as long as the process, then freeze
    that (no later collection walks it again, as `serve` does for its own start-up)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
