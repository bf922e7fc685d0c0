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
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis import checks as core_checks
from schemathesis.specs.openapi import checks as openapi_checks

from tests.support.runtimes import make_runtime
from tests.support.servers import TENANTS, Live, serve, server_files
from yao_agent.identity import OPERATOR
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply
from yao_agent.testing.fake_scenarios import RecordedRequest, reply_for_model

# A failing example with a long string makes hypothesis warn about the size of its report; the report matters more.
pytestmark = [
    pytest.mark.both_stores,  # a body PostgreSQL refuses (a NUL in a text) must still be a 400, never a 500
    pytest.mark.filterwarnings("ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"),
]

# schemathesis annotates its checks with a bare `Case`, which pyright reads as partially unknown: they are
# looked up through untyped references to their modules and given their type here.
Check = Callable[[CheckContext, Response, Case[Any]], bool | None]
_core_checks: Any = core_checks
_openapi_checks: Any = openapi_checks
not_a_server_error: Check = _core_checks.not_a_server_error
content_type_conformance: Check = _openapi_checks.content_type_conformance
negative_data_rejection: Check = _openapi_checks.negative_data_rejection
response_headers_conformance: Check = _openapi_checks.response_headers_conformance
response_schema_conformance: Check = _openapi_checks.response_schema_conformance

# Every health check. hypothesis leaves `HealthCheckMeta.__iter__` unannotated, which pyright misreads.
EVERY_HEALTH_CHECK: list[HealthCheck] = list(HealthCheck)  # pyright: ignore[reportAssignmentType]

LIMIT = 64 * 1024  # the request body limit the server below is given
# What the contract's errors use (bad input is never a 422); 429: a budget the fuzzer itself set (PUT /api/budgets
# with 0) refuses the runs it asks for afterwards, as documented.
ERROR_STATUSES = {400, 401, 403, 404, 405, 409, 413, 429}


# --- a server in a thread -----------------------------------------------------------------------------


@dataclass
class Served:
    url: str
    tokens: dict[str, str]
    provider: FakeProvider = field(repr=False)  # thread-safe to script from the test's thread
    stop: Any = field(repr=False)  # () -> None
    chat: str = ""  # a chat of alice's (see `seeded`), so chat routes are fuzzed on a real chat too


def seeded(served: Served) -> Served:
    """`served` with a chat of alice's that has a resume point (its last run failed)."""
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    seed = {"messages": [{"role": "user", "content": "seed"}]}
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:
        first = http.post("/api/assistants/chat/runs?stream=false", json=seed)
        assert first.status_code == 200, first.text
        served.chat = first.json()["chat_id"]
        served.provider.enqueue(Reply(status=500, error_message="down"))
        failed = http.post("/api/assistants/chat/runs?stream=false", json={**seed, "chat_id": served.chat})
        assert failed.json()["status"] == "failed"
        assert http.get(f"/api/chats/{served.chat}/resume").status_code == 200
    return served


def answer_in_kind(request: RecordedRequest) -> Reply:
    """The fake model's answer: JSON when the request asks for JSON (`response_format`), as a model in JSON
    mode would; a generated request that asks for it must not fail for the fake model's plain text."""
    if request.body.get("response_format"):
        return Reply(text="{}")
    return reply_for_model(request.model, request.messages)


def _run_server(raw_url: str, tmp: Path, ready: Future[Served]) -> None:
    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        async with FakeProvider(default=answer_in_kind) as provider:
            store = SqlStore(await open_engine(store_url(raw_url, tmp)))
            rt = make_runtime(tmp / "app", store, server_files(provider.base_url))
            runs = Runs(rt)
            try:
                tokens = {name: await store.create_token(OPERATOR, who) for name, who in TENANTS.items()}
                server, task, url = await serve(runs, max_body_bytes=LIMIT)
                ready.set_result(Served(url, tokens, provider, lambda: loop.call_soon_threadsafe(stopping.set)))
                await stopping.wait()
                server.should_exit = True
                await task
            finally:
                await runs.tenancy.tokens.aclose()  # the tokens' last-use writes, before their store closes
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
        error = cast(dict[str, Any], error)
        assert isinstance(error.get("type"), str) and isinstance(error.get("message"), str) and error["message"]
    elif status >= 300:  # only Starlette's redirect of a path ending in "/" (an id ending in %2F), to this server
        assert status == 307 and headers.get("location", "").startswith("http://127.0.0.1:"), f"{what} → {status}"
    elif content_type.startswith("text/event-stream"):
        frames = [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]
        assert frames, f"{what} → an empty event stream"
        last = frames[-1]
        ends = ("stream_end", "message_stop")  # native, Anthropic's
        assert last == "[DONE]" or json.loads(last)["type"] in ends, f"{what} → stream ended with {last!r}"
    else:
        assert content_type.startswith(("application/json", "text/html")), f"{what} → {content_type}"


# --- schemathesis over the OpenAPI document -----------------------------------------------------------

FUZZ = settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=EVERY_HEALTH_CHECK,
)
CHECKS: list[Check] = [
    not_a_server_error,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def strategies_for(operation: Any, mode: GenerationMode, chat: str) -> st.SearchStrategy[Case[Any]]:
    """The operation's cases, free and aimed at real things (alice's chat, the `chat` assistant), JSON not SSE."""
    names = {p.name for p in operation.path_parameters}
    query = {"stream": "false"} if mode.is_positive and any(p.name == "stream" for p in operation.query) else None
    free = operation.as_strategy(mode, query=query)
    aimed: dict[str, str] = {}
    if "chat_id" in names:
        aimed["chat_id"] = chat
    if "assistant_id" in names:
        aimed["assistant_id"] = "chat"
    if not aimed:
        return free
    return free | operation.as_strategy(mode, query=query, path_parameters=aimed)


def with_model(case: Case[Any], model: str | None) -> Case[Any]:
    if model is not None and isinstance(case.body, dict):
        case.body["model"] = model
    return case


def modes(operation: Any) -> list[GenerationMode]:
    """Positive always; negative where there is something to make invalid (a body, a typed query parameter).

    A free-text query parameter (the chat search) is not one: whatever is made of it reaches the server as
    text it accepts, so a "negative" case of it is a valid request (its length is tested in test_chats_api.py).
    """
    typed = [p for p in operation.query if p.definition.get("schema", {}).get("type") != "string"]
    negatable = bool(list(operation.body)) or bool(typed)
    return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if negatable else [GenerationMode.POSITIVE]


def fuzz_one(served: Served, session: requests.Session, operation: Any, mode: GenerationMode) -> None:
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    strategy = strategies_for(operation, mode, served.chat)
    if operation.path == "/v1/chat/completions" and mode.is_positive:
        strategy = st.builds(with_model, strategy, st.sampled_from([None, "chat", "private"]))
    checks = [*CHECKS, negative_data_rejection] if mode.is_negative else CHECKS

    @FUZZ
    @given(case=strategy)
    def one(case: Case[Any]) -> None:
        response = case.call(base_url=served.url, session=session, headers=auth, timeout=30)
        headers = {name.lower(): values[0] for name, values in response.headers.items()}
        assert_sane(response.status_code, headers, response.content, case.as_curl_command())
        content_type = headers.get("content-type", "")
        streamed = content_type.startswith("text/event-stream")  # the document gives the stream's type, not its frames
        declared = [not_a_server_error, content_type_conformance]
        # (schemathesis's own annotation of the checks it takes has a bare `Case`, as above)
        case.validate_response(response, checks=declared if streamed else checks, headers=auth)  # pyright: ignore[reportUnknownMemberType]

    one()


def tightened(document: dict[str, Any], chat: str) -> dict[str, Any]:
    """The document with CONTRACT §6's shapes where ours says only "objects", so valid cases get past validation.

    Our document types `messages` as a list of any objects and `chat_id` as any string, so nearly every
    generated "valid" run is a 400 (or a 404: a chat id must name one of the caller's chats). Positive
    cases come from this copy; negative ones from the original, whose looser shapes are a superset of
    what the server accepts (so "rejected" is the right answer).
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
    schemas["RunBody"]["properties"]["chat_id"] = {"enum": [chat]}
    schemas["CompletionBody"]["properties"]["model"] = {"enum": ["chat", "private"]}
    schemas["CompletionBody"]["properties"]["tools"] = {"type": "null"}
    anthropic = schemas["MessagesBody"]["properties"]
    anthropic["messages"]["items"] = {**message, "properties": {"role": {"enum": ["user", "assistant"]},
                                                                "content": {"type": "string"}}}  # fmt: skip
    anthropic["model"] = {"enum": ["chat", "private"]}
    schemas["RoleBody"] = {"type": "object", "additionalProperties": False, "required": ["connector"],
                           "properties": {"connector": {"enum": ["fake.model", "demo.echo"]}}}  # fmt: skip
    return tight


@pytest.mark.slow
def test_every_operation_of_the_openapi_document(served: Served) -> None:
    seeded(served)
    document = httpx.get(served.url + "/openapi.json", timeout=30).json()
    # A negative body made too long by the fuzzer may pass the body limit: its 413 is a refusal too.
    rejected = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
    settings = {"generation": {"allow-x00": True},
                "checks": {"negative_data_rejection": {"expected-statuses": rejected}}}  # fmt: skip
    config = schemathesis.Config.from_dict(settings)  # pyright: ignore[reportUnknownMemberType]  (a bare `dict` parameter)
    # schemathesis types its operations with bare generics: they are handled as Any here, like `operation` above.
    schemas: dict[GenerationMode, Any] = {
        GenerationMode.POSITIVE: schemathesis.openapi.from_dict(tightened(document, served.chat), config=config),
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
        count == 40 + 20
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


def alphabet() -> st.SearchStrategy[str]:
    # Every code point, NUL and lone surrogates included (text that cannot be stored or sent back is a 400).
    return st.characters()


def texts() -> st.SearchStrategy[str]:
    return st.text(alphabet(), max_size=40) | st.sampled_from(
        ["", "x" * 5000, "../../etc", "é🦄", "{{ last_user }}", "half \ud800 a pair", "\udfff"]
    )


def json_values() -> st.SearchStrategy[Any]:
    leaves = st.sampled_from(SPECIALS) | st.booleans() | st.integers() | st.floats() | texts()
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts(), inner, max_size=4),
        max_leaves=12,
    )


def messages() -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    """(valid message lists, odd ones: unknown roles, missing or wrong content, tool messages, junk)."""
    junk = json_values()
    valid = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]), "content": texts()})
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", ""]) | junk},
        optional={"text": texts() | junk, "image_url": junk},
    )
    odd = st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "system", "tool", "robot"]) | junk,
            "content": texts() | st.lists(part, max_size=3) | junk,
            "tool_call_id": st.text(alphabet(), max_size=300) | st.sampled_from(["t" * 129, "a\x00"]) | junk,
            "tool_calls": junk,
            "name": texts(),
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


def native_bodies(chat: str) -> st.SearchStrategy[dict[str, Any]]:
    junk = json_values()
    valid_messages, odd_messages = messages()
    odd = {
        "messages": odd_messages,
        "chat_id": st.sampled_from([chat, chat, "new-chat", "bad id!", "x" * 65, "", chat + "\n"]) | junk,
        "metadata": st.dictionaries(texts(), junk, max_size=3) | junk,
        "on_busy": st.sampled_from(["queue", "reject", "interrupt", "never"]) | junk,
        "user_id": st.just("bob"),
        "model": st.just("chat"),
    }
    return mutated({"messages": valid_messages}, odd)


def openai_bodies(chat: str) -> st.SearchStrategy[dict[str, Any]]:
    junk = json_values()
    valid_messages, odd_messages = messages()
    numbers = st.sampled_from([float("nan"), float("inf"), -1e308, 0, -1, 2**64, 0.5, "1"]) | st.floats() | junk
    odd = {
        "model": st.sampled_from(["private", "nobody", "Chat"]) | junk,
        "messages": odd_messages,
        "stream": st.booleans() | junk,
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans() | junk}) | junk,
        "metadata": st.fixed_dictionaries({"chat_id": st.sampled_from([chat, "new-chat", "bad id!"]) | junk}) | junk,
        "tools": junk,
        "temperature": numbers,
        "top_p": numbers,
        "max_tokens": numbers,
        "user": texts() | junk,
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
    """JSON as a client may send it: NaN and Infinity included, as Python reads them; a lone surrogate either
    escaped (`\\ud800`, valid JSON) or, unescaped, as the bytes no UTF-8 decoder accepts."""
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def shots(chat: str) -> st.SearchStrategy[Shot]:
    paths = st.sampled_from(RUN_PATHS)
    bodies = (
        st.tuples(st.sampled_from(NATIVE_RUNS), native_bodies(chat))
        | st.tuples(st.just("/v1/chat/completions"), openai_bodies(chat))
        | st.tuples(paths, json_values())
    )

    def json_shot(pb: tuple[str, Any], a: bool) -> Shot:
        return Shot(pb[0], encoded(pb[1], a))

    def cut_shot(pb: tuple[str, Any], n: int) -> Shot:
        return Shot(pb[0], encoded(pb[1], True)[:n])

    def text_shot(pb: tuple[str, Any]) -> Shot:
        return Shot(pb[0], encoded(pb[1], True), "text/plain")

    as_json = st.builds(json_shot, bodies, st.booleans())
    cut = st.builds(cut_shot, bodies, st.integers(0, 60))
    other_type = st.builds(text_shot, bodies)
    raw = st.builds(Shot, paths, st.binary(max_size=200))
    return st.sampled_from([as_json] * 7 + [cut, other_type, raw]).flatmap(lambda strategy: strategy)


@pytest.mark.slow
def test_random_bodies_at_the_run_endpoints(served: Served) -> None:
    seeded(served)
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:

        @settings(max_examples=300, deadline=None, database=None, suppress_health_check=EVERY_HEALTH_CHECK)
        @given(shot=shots(served.chat))
        def one(shot: Shot) -> None:
            response = http.post(shot.path, content=shot.content, headers={"Content-Type": shot.content_type})
            what = f"POST {shot.path} {shot.content_type} {shot.content[:300]!r}"
            assert_sane(response.status_code, response.headers, response.content, what)

        one()
        # Whatever was sent to it, alice's chat still reads back, as JSON a client can decode.
        for read in (f"/api/chats/{served.chat}/messages", "/api/chats"):
            response = http.get(read)
            assert response.status_code == 200 and response.json(), (read, response.text[:300])


ID_ROUTES = [
    ("GET", "/api/chats/{}/messages", None),
    ("GET", "/api/chats/{}/resume", None),
    ("POST", "/api/chats/{}/resume?stream=false", None),
    ("GET", "/api/chats/{}/runs/run_1", None),
    ("GET", "/api/chats/c1/runs/{}", None),
    ("POST", "/api/chats/{}/cancel", None),
    ("POST", "/api/chats/{}/append", {"messages": [{"role": "user", "content": "more"}]}),
    ("POST", "/api/chats/{}/regenerate?stream=false", None),
    ("POST", "/api/chats/{}/edit?stream=false", {"message_id": "msg_1", "content": "changed"}),
    ("PUT", "/api/roles/{}", {"connector": "demo.echo"}),
    ("POST", "/api/assistants/{}/runs?stream=false", {"messages": [{"role": "user", "content": "hi"}]}),
]


def test_random_ids_in_paths(served: Served) -> None:
    """Any id a client can put in a path (NUL, very long, non-ASCII, reserved characters) is a 4xx or works."""
    seeded(served)
    auth = {"Authorization": f"Bearer {served.tokens['alice']}"}
    ids = st.text(max_size=300) | st.sampled_from(["x" * 65, "r" * 129, "a\x00b", "%", "é", "a/", "chat", served.chat])
    with httpx.Client(base_url=served.url, headers=auth, timeout=30) as http:

        @settings(max_examples=120, deadline=None, database=None, suppress_health_check=EVERY_HEALTH_CHECK)
        @given(route=st.sampled_from(ID_ROUTES), name=ids)
        def one(route: tuple[str, str, Any], name: str) -> None:
            method, template, body = route
            path = template.format(quote(name, safe="", errors="surrogatepass"))
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


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/roles/" + "r" * 200, {"connector": "demo.echo"}),
        ("PUT", "/api/roles/nul%00", {"connector": "demo.echo"}),
        ("GET", "/api/chats/nul%00/messages", None),
        ("GET", "/api/chats/nul%00/resume", None),
        ("POST", "/api/chats/nul%00/resume?stream=false", None),
        ("GET", "/api/chats/nul%00/runs/run_1", None),
        ("GET", "/api/chats/c1/runs/nul%00", None),
        ("GET", "/api/chats/c1/runs/" + "r" * 200, None),
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


SURROGATE = b'"half \\ud800 a pair"'  # valid JSON, which Python decodes to a str no UTF-8 encoder accepts


def raw_run(path: str, message: bytes, chat_id: str | None = None) -> bytes:
    """A run's body as bytes, so the JSON escapes of `message` reach the server as written."""
    openai = path.startswith("/v1/")
    fields: dict[str, Any] = {"model": "chat"} if openai else {}
    if chat_id is not None:
        fields.update({"metadata": {"chat_id": chat_id}} if openai else {"chat_id": chat_id})
    return json.dumps(fields)[:-1].encode() + (b", " if fields else b"") + b'"messages": [' + message + b"]}"


SURROGATE_INPUTS = {
    "text": (b'{"role": "user", "content": %s}' % SURROGATE, "messages[0].content"),
    "text part": (
        b'{"role": "user", "content": [{"type": "text", "text": %s}]}' % SURROGATE,
        "messages[0].content[0].text",
    ),
    "other part": (
        b'{"role": "user", "content": [{"type": "image_url", "image_url": {"url": %s}}]}' % SURROGATE,
        "messages[0].content[0].image_url.url",
    ),
    "tool call id": (b'{"role": "tool", "content": "x", "tool_call_id": %s}' % SURROGATE, "messages[0].tool_call_id"),
    "tool call arguments": (
        b'{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", '
        b'"function": {"name": "f", "arguments": %s}}]}' % SURROGATE,
        "messages[0].tool_calls[0].function.arguments",
    ),
}


@pytest.mark.parametrize("path", ["/api/assistants/chat/runs?stream=false", "/v1/chat/completions"])
@pytest.mark.parametrize("chat", ["new chat", "existing chat"])
@pytest.mark.parametrize("what", list(SURROGATE_INPUTS))
async def test_a_lone_surrogate_is_a_400_naming_the_field(
    live: Live, provider: FakeProvider, path: str, chat: str, what: str
) -> None:
    """Fixed: in a new chat the store's UTF-8 encode failed (500); in an existing chat the text was stored
    (its JSON column escapes it) and then every read of the chat failed to render (500)."""
    message, field_name = SURROGATE_INPUTS[what]
    async with live.client("alice") as client:
        chat_id = None
        if chat == "existing chat":
            made = await client.post("/api/assistants/chat/runs?stream=false", json={"messages": [
                {"role": "user", "content": "hi"}]})  # fmt: skip
            chat_id = made.json()["chat_id"]
        response = await client.post(path, content=raw_run(path, message, chat_id),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["message"] == f"{field_name}: text contains an unpaired UTF-16 surrogate", error
        if chat_id is not None:  # the chat is as it was, and reads back
            history = await client.get(f"/api/chats/{chat_id}/messages")
            assert [m["content"] for m in history.json()["messages"]] == ["hi", "Hello world"]
        listed = await client.get("/api/chats")
    assert listed.status_code == 200 and len(listed.json()["chats"]) == (1 if chat_id else 0)
    assert len(provider.requests) == (1 if chat_id else 0)  # the refused request never reached the model


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        ({"metadata": {"note": "\ud800"}}, "metadata.note"),
        ({"metadata": {"deep": [{"x": "a\udc00"}]}}, "metadata.deep[0].x"),
        ({"metadata": {"\ud800": 1}}, "metadata"),
    ],
)
async def test_a_lone_surrogate_in_metadata_is_a_400(live: Live, body: dict[str, Any], field_name: str) -> None:
    raw = json.dumps({"messages": [{"role": "user", "content": "hi"}], **body}).encode()  # escaped: valid JSON
    async with live.client("alice") as client:
        response = await client.post("/api/assistants/chat/runs?stream=false", content=raw,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(f"{field_name}: ")
    assert "unpaired UTF-16 surrogate" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("message", "field_name"),
    [
        ({"role": "tool", "content": "x", "tool_call_id": "nul\x00"}, "messages[0].tool_call_id"),
        ({"role": "tool", "content": "x", "tool_call_id": "t" * 129}, "messages[0].tool_call_id"),
        ({"role": "tool", "content": "x", "tool_call_id": "line\nbreak"}, "messages[0].tool_call_id"),
        ({"role": "tool", "content": "x", "tool_call_id": ""}, "messages[0].tool_call_id"),
        ({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c\x00", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         "messages[0].tool_calls[0].id"),
        ({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c" * 129, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         "messages[0].tool_calls[0].id"),
    ],
    ids=["nul", "129-characters", "newline", "empty", "call-id-nul", "call-id-129-characters"],
)  # fmt: skip
async def test_a_tool_call_id_the_store_cannot_hold_is_a_400(
    live: Live, message: dict[str, Any], field_name: str
) -> None:
    """Fixed: on PostgreSQL (VARCHAR(128), no NUL) the store refused it and the run was a 500."""
    async with live.client("alice") as client:
        response = await client.post("/api/assistants/chat/runs?stream=false", json={"messages": [message]})
        longest = await client.post("/api/assistants/chat/runs?stream=false", json={"messages": [
            {"role": "tool", "content": "x", "tool_call_id": "t" * 128}]})  # fmt: skip
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(f"{field_name}: ")
    assert longest.status_code == 200, longest.text  # 128 characters are fine


async def test_nul_in_text_is_kept_and_read_back(live: Live) -> None:
    """Fixed: on PostgreSQL the chat's title (a text column, which refuses NUL) made the run a 500."""
    async with live.client("alice") as client:
        response = await client.post("/api/assistants/chat/runs?stream=false",
                                     json={"messages": [{"role": "user", "content": "nul \x00 byte"}]})  # fmt: skip
        assert response.status_code == 200, response.text
        chat_id = response.json()["chat_id"]
        history = (await client.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        listed = (await client.get("/api/chats")).json()["chats"]
    assert history[0]["content"] == "nul \x00 byte"  # the message as sent (a JSON column holds it)
    assert [c["title"] for c in listed] == ["nul  byte"]  # the title, a plain text column, without it
