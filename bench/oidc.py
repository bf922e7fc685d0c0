"""What checking an identity provider's JWT adds to a request, once its key is kept (the common case).

    .venv/bin/python bench/oidc.py [--calls 2000]

A loopback identity provider (yao_agent.testing.fake_idp) issues the tokens; the server's `Verifier`
fetches its key set once, then every call is the check alone. A token's first request verifies it
(header, key lookup, signature, claims, the claims mapped to an identity); its later ones find it
verified until its `exp`, as a client sends the same token until it expires. RS256 (RSA 2048) and
ES256 (P-256), the two algorithms taken; median time per call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import Row, print_table
from yao_agent.dsl.specs import OidcSettings
from yao_agent.server.oidc import Verifier
from yao_agent.testing.fake_idp import FakeIdP

TARGET_MS = 0.1  # what a request pays for its token, the provider's key kept (issue 30)
FIRST_MS = 1.0  # a token not seen before: the signature verified (RSA 2048 or P-256)


async def check_ms(verifier: Verifier, tokens: list[str], calls: int) -> float:
    """Median ms of one check, over `calls` checks cycling through `tokens` (their key already fetched)."""
    samples: list[float] = []
    for n in range(calls):
        token = tokens[n % len(tokens)]
        start = time.perf_counter()
        await verifier.identity(token)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


async def measure(calls: int) -> list[Row]:
    rows: list[Row] = []
    async with FakeIdP() as idp:
        for alg in ("RS256", "ES256"):
            if alg != idp.keys[-1].alg:
                idp.rotate(alg)
            verifier = Verifier(OidcSettings(issuer=idp.issuer, audience=idp.audience, client_id=idp.client_id))
            fresh = [idp.mint(sub=f"user-{n}") for n in range(min(calls, 300))]
            try:
                await verifier.identity(idp.mint())  # the key set is fetched here, once
                first = await check_ms(verifier, fresh, len(fresh))
                again = await check_ms(verifier, fresh, calls)
            finally:
                await verifier.aclose()
            rows += [
                Row(f"JWT check per request, cached key ({alg})", again, "ms", "max", TARGET_MS,
                    note=f"median of {calls}: a token seen before, until its exp"),
                Row(f"JWT check, a token's first request ({alg})", first, "ms", "max", FIRST_MS,
                    note=f"median of {len(fresh)}: signature, iss, aud, exp verified, claims to identity"),
            ]  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    rows = asyncio.run(measure(args.calls))
    print_table(rows)
    sys.exit(0 if all(r.met for r in rows) else 1)


if __name__ == "__main__":
    main()
