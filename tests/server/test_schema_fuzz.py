"""Property-based tests of the HTTP API against a real uvicorn: whatever a client sends, the server answers sanely.

* schemathesis generates requests for every operation of our own OpenAPI document (`GET /openapi.json`),
  valid ones and invalid ones, with alice's token;
* hypothesis throws random JSON (wrong types, nested junk, missing fields, NaN, huge strings), raw bytes
  that are not JSON, and bodies above the 64 KiB limit at the two run endpoints.

The properties: never a 5xx; every error is JSON `{"error": {"type", "message"}}`; a status the document
declares comes with the declared content; an invalid request (by the document) is never a success.
Hypothesis runs synchronously, so the server runs in a thread of its own, on its own event loop.

Bugs found on the way have a test of their own at the end.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
)

from tests.pipeline.conftest import make_runtime
from tests.server.conftest import TENANTS, Live, serve, server_files
from yao_agent.identity import OPERATOR
from yao_agent.pipeline.permission import CHAT_ID
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply

# A failing example with a long string makes hypothesis warn about the size of its report; the report matters more.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning")

LIMIT = 64 * 1024  # the request body limit the server below is given
SEEDED_CHAT = "fz-1"  # a chat of alice's, so chat routes are fuzzed on a real chat as well as on unknown ids
ERROR_STATUSES = {400, 401, 403, 404, 405, 409, 413}  # what the contract's errors use (bad input is never a 422)


# --- a server in a thread -----------------------------------------------------------------------------


@dataclass
class Served:
    url: str
    tokens: dict[str, str]
    postgres: bool
    fake: FakeProvider = field(repr=False)  # thread-safe to script from the test's thread
    stop: Any = field(repr=False)  # () -> None


def _run_server(raw_url: str, tmp: Path, ready: Future[Served]) -> None:
    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        async with FakeProvider() as fake:
            store = SqlStore(await open_engine(store_url(raw_url, tmp)))
            rt = make_runtime(tmp / "app", store, server_files(fake.base_url))
            try:
                tokens = {name: await store.create_token(OPERATOR, who) for name, who in TENANTS.items()}
                server, task, url = await serve(rt, max_body_bytes=LIMIT)
                postgres = store.engine.dialect.name == "postgresql"
                ready.set_result(Served(url, tokens, postgres, fake, lambda: loop.call_soon_threadsafe(stopping.set)))
                await stopping.wait()
                server.should_exit = True
                await task
            finally:
                await rt.engines.aclose()
                await rt.tools.aclose()
                await store.aclose()

    try:
        asyncio.run(main())
    except BaseException as exc:  # handed to the test, which raises it
        if not ready.done():
            ready.set_exception(exc)
        else:
            raise


@pytest.fixture
def served(store_raw_url: str, tmp_path: Path) -> Iterator[Served]:
    ready: Future[Served] = Future()
    thread = threading.Thread(target=_run_server, args=(store_raw_url, tmp_path, ready), name="fuzzed server")
    thread.start()
    result = ready.result(timeout=60)
    try:
        yield result
    finally:
        result.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the server thread did not stop"


# --- what every answer must look like -----------------------------------------------------------------


def assert_sane(status: int, headers: Mapping[str, str], body: bytes, what: str) -> None:
    """Never a 5xx; an error is a contract error; a streamed answer ends the way the contract says."""
    content_type = headers.get("content-type", "")
    assert status < 500, f"{what} → {status}: {body[:500]!r}"
    if status >= 400:
        assert status in ERROR_STATUSES, f"{what} → unexpected status {status}: {body[:500]!r}"
        assert content_type.startswith("application/json"), f"{what} → {status} {content_type}: {body[:300]!r}"
        error = json.loads(body).get("error")
        assert isinstance(error, dict), f"{what} → {body[:300]!r}"
        assert isinstance(error.get("type"), str) and isinstance(error.get("message"), str) and error["message"]
    elif status >= 300:  # only Starlette's redirect of a path ending in "/" (an id ending in %2F), to this server
        assert status == 307 and headers.get("location", "").startswith("http://127.0.0.1:"), f"{what} → {status}"
    elif content_type.startswith("text/event-stream"):
        frames = [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]
        assert frames, f"{what} → an empty event stream"
        last = frames[-1]
        assert last == "[DONE]" or json.loads(last)["type"] == "stream_end", f"{what} → stream ended with {last!r}"
    else:
        assert content_type.startswith(("application/json", "text/html")), f"{what} → {content_type}"


# --- schemathesis over the OpenAPI document -----------------------------------------------------------

FUZZ = settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
CHECKS = [not_a_server_error, content_type_conformance, response_schema_conformance, response_headers_conformance]


def strategies_for(operation: Any, mode: GenerationMode) -> st.SearchStrategy[Case]:
    """The operation's cases, free and aimed at real things (alice's chat, the `chat` assistant), JSON not SSE."""
    names = {p.name for p in operation.path_parameters}
    query = {"stream": "false"} if mode.is_positive and any(p.name == "stream" for p in operation.query) else None
    free = operation.as_strategy(mode, query=query)
    aimed: dict[str, str] = {}
    if "chat_id" in names:
        aimed["chat_id"] = SEEDED_CHAT
    if "assistant_id" in names:
        aimed["assistant_id"] = "chat"
    if not aimed:
        return free
    return free | operation.as_strategy(mode, query=query, path_parameters=aimed)


def with_model(case: Case, model: str | None) -> Case:
    if model is not None and isinstance(case.body, dict):
        case.body["model"] = model
    return case


def modes(operation: Any) -> list[GenerationMode]:
    """Positive always; negative where there is something to make invalid (a body, a typed query parameter)."""
    negatable = bool(list(operation.body)) or bool(list(operation.query))
    return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if negatable else [GenerationMode.POSITIVE]


def fuzz_one(served: Served, session: requests.Session, operation: Any, mode: GenerationMode) -> None:
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    strategy = strategies_for(operation, mode)
    if operation.path == "/v1/chat/completions" and mode.is_positive:
        strategy = st.builds(with_model, strategy, st.sampled_from([None, "chat", "private"]))
    checks = [*CHECKS, negative_data_rejection] if mode.is_negative else CHECKS

    @FUZZ
    @given(case=strategy)
    def one(case: Case) -> None:
        response = case.call(base_url=served.url, session=session, headers=auth, timeout=30)
        headers = {name.lower(): values[0] for name, values in response.headers.items()}
        assert_sane(response.status_code, headers, response.content, case.as_curl_command())
        content_type = headers.get("content-type", "")
        streamed = content_type.startswith("text/event-stream")  # the document describes the JSON answer only
        case.validate_response(response, checks=[not_a_server_error] if streamed else checks, headers=auth)

    one()


def tightened(document: dict[str, Any]) -> dict[str, Any]:
    """The document with CONTRACT §6's shapes where ours says only "objects", so valid cases get past validation.

    Our document types `messages` as a list of any objects and `chat_id` as any string, so nearly every
    generated "valid" run is a 400. Positive cases come from this copy; negative ones from the original,
    whose looser shapes are a superset of what the server accepts (so "rejected" is the right answer).
    """
    tight = copy.deepcopy(document)
    schemas = tight["components"]["schemas"]
    roles = {"enum": ["user", "assistant", "system"]}
    message = {"type": "object", "required": ["role", "content"],
               "properties": {"role": roles, "content": {"type": "string"}}}  # fmt: skip
    for name in ("RunBody", "CompletionBody", "AppendBody"):
        schemas[name]["properties"]["messages"]["items"] = message
    schemas["AppendBody"]["properties"]["messages"]["items"] = {**message, "properties": {
        "role": {"const": "user"}, "content": {"type": "string"}}}  # fmt: skip
    schemas["RunBody"]["properties"]["chat_id"] = {"type": "string", "pattern": CHAT_ID.pattern}
    schemas["CompletionBody"]["properties"]["model"] = {"enum": ["chat", "private"]}
    schemas["CompletionBody"]["properties"]["tools"] = {"type": "null"}
    schemas["RoleBody"] = {"type": "object", "additionalProperties": False, "required": ["connector"],
                           "properties": {"connector": {"enum": ["fake.model", "demo.echo"]}}}  # fmt: skip
    return tight


def test_every_operation_of_the_openapi_document(served: Served) -> None:
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    seed = {"messages": [{"role": "user", "content": "seed"}], "chat_id": SEEDED_CHAT}
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:
        document = http.get("/openapi.json").json()
        assert http.post("/api/assistants/chat/runs?stream=false", json=seed).status_code == 200
        served.fake.enqueue(Reply(status=500, error_message="down"))  # so the chat has a resume point to fuzz
        assert http.post("/api/assistants/chat/runs?stream=false", json=seed).json()["status"] == "failed"
        assert http.get(f"/api/chats/{SEEDED_CHAT}/resume").status_code == 200
    # PostgreSQL cannot store NUL in text columns: a known bug (see the tests at the end), kept out of the fuzzing.
    config = schemathesis.Config.from_dict({"generation": {"allow-x00": not served.postgres}})
    schemas = {
        GenerationMode.POSITIVE: schemathesis.openapi.from_dict(tightened(document), config=config),
        GenerationMode.NEGATIVE: schemathesis.openapi.from_dict(document, config=config),
    }
    count = 0
    with requests.Session() as session:
        for mode, schema in schemas.items():
            for result in schema.get_all_operations():
                operation = result.ok()
                if mode in modes(operation):
                    fuzz_one(served, session, operation, mode)
                    count += 1
    assert (
        count == 12 + 5
    )  # every operation (test_tenants.py checks they are every route), and those with inputs negatively


# --- hypothesis: random JSON at the run endpoints -----------------------------------------------------


SPECIALS: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    0.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    [],
    {},
    [[]],
    "chat",
]


def alphabet(postgres: bool) -> st.SearchStrategy[str]:
    # Known bugs (see the tests at the end), kept out of the fuzzing: lone surrogates (no UTF-8 codec), and NUL on
    # PostgreSQL, whose text columns cannot hold it.
    return st.characters(codec="utf-8", exclude_characters="\x00" if postgres else None)


def texts(postgres: bool) -> st.SearchStrategy[str]:
    return st.text(alphabet(postgres), max_size=40) | st.sampled_from(
        ["", "x" * 5000, "../../etc", "é🦄", "{{ last_user }}"]
    )


def json_values(postgres: bool) -> st.SearchStrategy[Any]:
    leaves = st.sampled_from(SPECIALS) | st.booleans() | st.integers() | st.floats() | texts(postgres)
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts(postgres), inner, max_size=4),
        max_leaves=12,
    )


def messages(postgres: bool) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    """(valid message lists, odd ones: unknown roles, missing or wrong content, tool messages, junk)."""
    junk = json_values(postgres)
    valid = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]), "content": texts(postgres)}
    )
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", ""]) | junk},
        optional={"text": texts(postgres) | junk, "image_url": junk},
    )
    odd = st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "system", "tool", "robot"]) | junk,
            "content": texts(postgres) | st.lists(part, max_size=3) | junk,
            # PostgreSQL's column holds 128 characters (a known bug: longer ones fail the run, see below)
            "tool_call_id": st.text(alphabet(postgres), max_size=128 if postgres else 300) | junk,
            "tool_calls": junk,
            "name": texts(postgres),
        },
    )
    return st.lists(valid, min_size=1, max_size=3), st.lists(valid | odd, max_size=3) | junk


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any], odd: dict[str, Any]) -> dict[str, Any]:
    """A valid body with some fields made odd, dropped or added: often past validation, and wrong anywhere."""
    body = {name: draw(strategy) for name, strategy in valid.items()}
    for name in sorted(odd):
        action = draw(st.sampled_from(["keep", "keep", "keep", "odd", "odd", "drop"]))
        if action == "drop":
            body.pop(name, None)
        elif action == "odd":
            body[name] = draw(odd[name])
    return body


def native_bodies(postgres: bool) -> st.SearchStrategy[dict[str, Any]]:
    junk = json_values(postgres)
    valid_messages, odd_messages = messages(postgres)
    odd = {
        "messages": odd_messages,
        "chat_id": st.sampled_from([SEEDED_CHAT, "new-chat", "bad id!", "x" * 65, ""]) | junk,
        "metadata": st.dictionaries(texts(postgres), junk, max_size=3) | junk,
        "on_busy": st.sampled_from(["queue", "reject", "interrupt", "never"]) | junk,
        "user_id": st.just("bob"),
        "model": st.just("chat"),
    }
    return mutated({"messages": valid_messages}, odd)


def openai_bodies(postgres: bool) -> st.SearchStrategy[dict[str, Any]]:
    junk = json_values(postgres)
    valid_messages, odd_messages = messages(postgres)
    numbers = st.sampled_from([float("nan"), float("inf"), -1e308, 0, -1, 2**64, 0.5, "1"]) | st.floats() | junk
    odd = {
        "model": st.sampled_from(["private", "nobody", "Chat"]) | junk,
        "messages": odd_messages,
        "stream": st.booleans() | junk,
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans() | junk}) | junk,
        "metadata": st.fixed_dictionaries({"chat_id": st.sampled_from([SEEDED_CHAT, "bad id!"]) | junk}) | junk,
        "tools": junk,
        "temperature": numbers,
        "top_p": numbers,
        "max_tokens": numbers,
        "user": texts(postgres) | junk,
    }
    return mutated({"model": st.just("chat"), "messages": valid_messages}, odd)


@dataclass(frozen=True)
class Shot:
    path: str
    content: bytes
    content_type: str = "application/json"


NATIVE_RUNS = ["/api/assistants/chat/runs?stream=false", "/api/assistants/chat/runs"]
RUN_PATHS = [*NATIVE_RUNS, "/v1/chat/completions"]


def encoded(body: Any, ascii_only: bool) -> bytes:
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8")  # NaN and Infinity included, as Python reads them


def shots(postgres: bool) -> st.SearchStrategy[Shot]:
    paths = st.sampled_from(RUN_PATHS)
    bodies = (
        st.tuples(st.sampled_from(NATIVE_RUNS), native_bodies(postgres))
        | st.tuples(st.just("/v1/chat/completions"), openai_bodies(postgres))
        | st.tuples(paths, json_values(postgres))
    )
    as_json = st.builds(lambda pb, a: Shot(pb[0], encoded(pb[1], a)), bodies, st.booleans())
    cut = st.builds(lambda pb, n: Shot(pb[0], encoded(pb[1], True)[:n]), bodies, st.integers(0, 60))
    other_type = st.builds(lambda pb: Shot(pb[0], encoded(pb[1], True), "text/plain"), bodies)
    raw = st.builds(Shot, paths, st.binary(max_size=200))
    return st.sampled_from([as_json] * 7 + [cut, other_type, raw]).flatmap(lambda strategy: strategy)


def test_random_bodies_at_the_run_endpoints(served: Served) -> None:
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:

        @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(shot=shots(served.postgres))
        def one(shot: Shot) -> None:
            response = http.post(shot.path, content=shot.content, headers={"Content-Type": shot.content_type})
            what = f"POST {shot.path} {shot.content_type} {shot.content[:300]!r}"
            assert_sane(response.status_code, response.headers, response.content, what)

        one()


ID_ROUTES = [
    ("GET", "/api/chats/{}/messages", None),
    ("GET", "/api/chats/{}/resume", None),
    ("POST", "/api/chats/{}/resume?stream=false", None),
    ("POST", "/api/chats/{}/cancel", None),
    ("POST", "/api/chats/{}/append", {"messages": [{"role": "user", "content": "more"}]}),
    ("PUT", "/api/roles/{}", {"connector": "demo.echo"}),
    ("POST", "/api/assistants/{}/runs?stream=false", {"messages": [{"role": "user", "content": "hi"}]}),
]


def test_random_ids_in_paths(served: Served) -> None:
    """Any id a client can put in a path (NUL, very long, non-ASCII, reserved characters) is a 4xx or works."""
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    ids = st.text(max_size=300) | st.sampled_from(["x" * 65, "r" * 129, "a\x00b", "%", "é", "a/", "chat", SEEDED_CHAT])
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:

        @settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(route=st.sampled_from(ID_ROUTES), name=ids)
        def one(route: tuple[str, str, Any], name: str) -> None:
            method, template, body = route
            path = template.format(quote(name, safe=""))
            response = http.request(method, path, json=body)
            what = f"{method} {path[:300]}"
            assert_sane(response.status_code, response.headers, response.content, what)

        one()


@pytest.mark.parametrize("path", ["/api/assistants/chat/runs?stream=false", "/v1/chat/completions"])
def test_bodies_above_the_limit_are_a_413_declared_or_not(served: Served, path: str) -> None:
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}

    def body(size: int) -> bytes:
        fields = {"model": "chat"} if path.startswith("/v1/") else {}
        return json.dumps({**fields, "messages": [{"role": "user", "content": "x" * size}]}).encode()

    huge = body(LIMIT + 1)
    chunks = [huge[i : i + 8192] for i in range(0, len(huge), 8192)]
    json_type = {"Content-Type": "application/json"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:
        declared = http.post(path, content=huge, headers=json_type)
        chunked = http.post(path, content=iter(chunks), headers=json_type)
        under = http.post(path, content=body(LIMIT - 200), headers=json_type)
    assert "content-length" not in chunked.request.headers  # the limit holds on what is read, not only on what is said
    for response in (declared, chunked):
        assert response.status_code == 413, response.text
        assert response.json()["error"]["type"] == "request_too_large"
        assert str(LIMIT) in response.json()["error"]["message"]
    assert under.status_code == 200, under.text


# --- bugs found by fuzzing ----------------------------------------------------------------------------


def postgres_only_bug(live: Live, request: pytest.FixtureRequest, reason: str) -> None:
    if live.rt.store.engine.dialect.name == "postgresql":
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/roles/" + "r" * 200, {"connector": "demo.echo"}),
        ("PUT", "/api/roles/nul%00", {"connector": "demo.echo"}),
        ("GET", "/api/chats/nul%00/messages", None),
        ("GET", "/api/chats/nul%00/resume", None),
        ("POST", "/api/chats/nul%00/resume?stream=false", None),
        ("POST", "/api/chats/nul%00/cancel", None),
        ("POST", "/api/chats/nul%00/append", {"messages": [{"role": "user", "content": "x"}]}),
    ],
)
async def test_ids_the_store_cannot_hold_are_4xx_not_500(live: Live, method: str, path: str, body: Any) -> None:
    """Fixed: on PostgreSQL a NUL byte or an overlong role name reached a query and was a 500."""
    async with live.client("alice") as client:
        response = await client.request(method, path, json=body)
    assert response.status_code in (400, 404), response.text
    assert response.json()["error"]["type"] in ("invalid_request", "not_found")


@pytest.mark.parametrize("field", ["temperature", "top_p"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_non_finite_sampling_options_are_a_400(live: Live, field: str, value: str) -> None:
    """Fixed: Python's JSON reads NaN/Infinity; they reached the provider call, which could not send them (500)."""
    raw = f'{{"model": "chat", "messages": [{{"role": "user", "content": "x"}}], "{field}": {value}}}'
    async with live.client("alice") as client:
        response = await client.post("/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]


@pytest.mark.xfail(strict=True, reason="bug: a lone surrogate in message text fails the store's UTF-8 encode (500)")
@pytest.mark.parametrize("path", ["/api/assistants/chat/runs?stream=false", "/v1/chat/completions"])
async def test_a_lone_surrogate_in_text_is_not_a_500(live: Live, path: str) -> None:
    model = b'"model": "chat", ' if path.startswith("/v1/") else b""
    raw = b"{" + model + b'"messages": [{"role": "user", "content": "half \\ud800 a pair"}]}'
    async with live.client("alice") as client:
        response = await client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code < 500, response.text


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "nul \x00 byte"},
        {"role": "tool", "content": "x", "tool_call_id": "nul\x00"},
        {"role": "tool", "content": "x", "tool_call_id": "t" * 129},
    ],
    ids=["nul-in-text", "nul-in-tool-call-id", "long-tool-call-id"],
)
async def test_text_postgres_cannot_hold_is_not_a_500(
    live: Live, request: pytest.FixtureRequest, message: dict[str, str]
) -> None:
    postgres_only_bug(live, request, "bug: PostgreSQL text columns refuse NUL and tool_call_id is VARCHAR(128)")
    async with live.client("alice") as client:
        response = await client.post("/api/assistants/chat/runs?stream=false", json={"messages": [message]})
    assert response.status_code < 500, response.text
