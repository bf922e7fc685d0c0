"""The TLS context the `openai` engine's https endpoints share: the SDK's default, made once, on a thread.

Left to the SDK, each client's transport loads the CA bundle on the event loop's thread (about 50 ms
of CPU). OpenSSL loads it outside the GIL, so a thread started before the engine is imported has it
ready by the time the first call needs it. This module imports neither the SDK nor its HTTP library.
"""

from __future__ import annotations

import os
import platform
import re
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import Future

# Where CA bundles are on Linux systems whose OpenSSL's compiled-in paths are unusable, as the SDK's
# transport looks for them.
CA_FILE_CANDIDATES = (
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/cert.pem",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/ca-bundle.pem",
)


def default_tls() -> ssl.SSLContext:
    """What the SDK's transport (httpx2) makes when given no TLS settings: `SSL_CERT_FILE` or
    `SSL_CERT_DIR` if set, the system's trust store on Windows and macOS, else OpenSSL's compiled-in
    CA paths. Said here because importing that HTTP library, on the thread, cost more CPU than loading
    the bundle (a test holds the two contexts alike); on Windows and macOS it is still asked."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    if platform.system() in ("Windows", "Darwin"):
        import httpx2  # (its trust store's context, as it makes it)

        return httpx2.create_ssl_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    paths = ssl.get_default_verify_paths()  # compiled in (`set_default_verify_paths` would read SSL_CERT_*)
    cafile = paths.openssl_cafile if os.path.isfile(paths.openssl_cafile) else None
    capath = paths.openssl_capath if os.path.isdir(paths.openssl_capath) else None
    if capath and not cafile and not any(re.fullmatch(r"[0-9a-fA-F]{8}\.\d", f) for f in os.listdir(capath)):
        capath = None  # a folder without OpenSSL's hashed names finds no certificate
    if not cafile and not capath:
        cafile = next(filter(os.path.isfile, CA_FILE_CANDIDATES), None)
    if cafile or capath:
        context.load_verify_locations(cafile, capath)
    return context


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
