"""What the `openai` SDK's client for an endpoint sends with every request, said without importing the SDK.

Importing the SDK costs most of a second of CPU (its ~600 typed models are built at import), which the
first call of every process paid just to learn a URL and a few headers: what a short-lived worker, a
CLI call or a serverless function waits for. For what connectors give (a key, a plain http(s) base URL,
their own headers), the SDK's client says them as below (a test holds the two equal). Anything else is
left to the SDK itself (`None`): no key or no base URL (the SDK then reads its own variables), a URL it
would rewrite or refuse, the key that stands for workload identity, `OPENAI_CUSTOM_HEADERS`.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
from collections.abc import Mapping
from importlib import metadata

from yao_agent.connectors.providers import Endpoint

# A base URL the SDK's URL type leaves as it is: lower-case scheme and host (no IDNA, no IPv6), a port
# other than the scheme's own, a path of plain segments (none that is "." or ".."), no query.
_PLAIN_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::(?P<port>[1-9][0-9]{0,4}))?"
    r"(?P<path>(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/?)"
)
_DEFAULT_PORT = {"http": 80, "https": 443}
_WORKLOAD_IDENTITY_KEY = "workload-identity-auth"  # the SDK's placeholder key: it sends no Authorization then
_OMITTED = object()  # the SDK's `Omit`: a header left out


def sdk_request(endpoint: Endpoint) -> tuple[str, dict[str, str]] | None:
    """The base URL (with its trailing slash) and the headers the SDK's async client sends to this
    endpoint, in its order; None where the SDK must say it."""
    key, base = endpoint.api_key, endpoint.base_url
    if not key or key == _WORKLOAD_IDENTITY_KEY or base is None or "OPENAI_CUSTOM_HEADERS" in os.environ:
        return None
    url = plain_base_url(base)
    if url is None:
        return None
    custom = dict(endpoint.headers)
    organization, project = os.environ.get("OPENAI_ORG_ID"), os.environ.get("OPENAI_PROJECT_ID")
    version = sdk_version()
    given: dict[str, object] = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json",
        "Content-Type": "application/json",
        "User-Agent": f"AsyncOpenAI/Python {version}",
        **platform_headers(version),
        **custom,
        "X-Stainless-Async": "async:asyncio",
        "OpenAI-Organization": organization if organization is not None else _OMITTED,
        "OpenAI-Project": project if project is not None else _OMITTED,
        **custom,
    }
    return url, merged(given)


def merged(given: Mapping[str, object]) -> dict[str, str]:
    """The headers as the SDK's request builder merges them: names case-insensitive, the last one said
    wins (and goes last), an omitted one is left out."""
    headers: dict[str, str] = {}
    for name, value in given.items():
        if isinstance(value, str):
            headers = {k: v for k, v in headers.items() if k.lower() != name.lower()} | {name: value}
    return headers


def plain_base_url(base: str) -> str | None:
    """`base` with the trailing slash the SDK gives it, if the SDK would leave it otherwise as written."""
    match = _PLAIN_URL.fullmatch(base)
    if match is None:
        return None
    host, port = match["host"], match["port"]
    if port is not None and (int(port) > 65535 or int(port) == _DEFAULT_PORT[match["scheme"]]):
        return None  # the SDK drops the scheme's own port; one past 65535 fails later there
    if (re.fullmatch(r"[0-9.]+", host) and not _dotted_quad(host)) or "xn--" in host:
        return None  # an IPv4 address it would check, a name it would decode
    return base if base.endswith("/") else f"{base}/"


def _dotted_quad(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) <= 255 and (p == "0" or not p.startswith("0")) for p in parts)


@functools.cache
def sdk_version() -> str:
    return metadata.version("openai")


@functools.cache
def platform_headers(version: str) -> dict[str, str]:
    """The SDK's `X-Stainless-*` headers: its version, and the platform and Python it runs on."""
    return {
        "X-Stainless-Lang": "python",
        "X-Stainless-Package-Version": version,
        "X-Stainless-OS": _os_name(),
        "X-Stainless-Arch": _architecture(),
        "X-Stainless-Runtime": platform.python_implementation(),
        "X-Stainless-Runtime-Version": platform.python_version(),
    }


def _os_name() -> str:
    try:
        system, name = platform.system().lower(), platform.platform().lower()
    except Exception:  # the SDK's own fallback
        return "Unknown"
    if "iphone" in name or "ipad" in name:
        return "iOS"
    if system in ("darwin", "windows"):
        return "MacOS" if system == "darwin" else "Windows"
    if "android" in name:
        return "Android"
    if system in ("freebsd", "openbsd"):
        return {"freebsd": "FreeBSD", "openbsd": "OpenBSD"}[system]
    if system == "linux":
        try:
            distro = platform.freedesktop_os_release().get("ID", "").lower()
        except OSError:
            distro = ""
        return {"freebsd": "FreeBSD", "openbsd": "OpenBSD"}.get(distro, "Linux")
    return f"Other:{name}" if name else "Unknown"


def _architecture() -> str:
    try:
        machine = platform.machine().lower()
    except Exception:  # the SDK's own fallback
        return "unknown"
    if machine in ("arm64", "aarch64"):
        return "arm64"
    if machine in ("arm", "x86_64"):
        return "arm" if machine == "arm" else "x64"
    if sys.maxsize <= 2**32:
        return "x32"
    return f"other:{machine}" if machine else "unknown"
