"""The TLS context the `openai` engine's clients share: the SDK's default, made once, on a thread.

Left to the SDK, each client's transport loads the CA bundle on the event loop's thread (about 50 ms
of CPU). OpenSSL loads it outside the GIL, so a thread started before the SDK is imported (which
takes most of a second) has it ready by the time the first call needs it. This module does not
import the SDK.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from concurrent.futures import Future


def default_tls() -> ssl.SSLContext:
    """What the SDK's transport makes when given no TLS settings: the CA bundle, `SSL_CERT_*` honoured."""
    import httpx2  # the SDK's HTTP library, much lighter than the SDK

    return httpx2.create_ssl_context()


def on_thread(make: Callable[[], ssl.SSLContext] = default_tls) -> Future[ssl.SSLContext]:
    """Start making the context on a thread of its own; the future has it, or what went wrong."""
    future: Future[ssl.SSLContext] = Future()

    def run() -> None:
        try:
            future.set_result(make())
        except BaseException as exc:  # handed to whoever waits for the context
            future.set_exception(exc)

    threading.Thread(target=run, name="yao-openai-tls", daemon=True).start()
    return future
