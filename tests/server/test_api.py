"""The HTTP API over a real uvicorn: the official openai client, the native SSE stream, cancel, append, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, openai_client, running, server_files, sse
from tests.support.stores import CountingStore
from tests.support.waits import wait_until
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

ALICE = Identity("alice")


async def test_openai_client_non_streaming(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="Hi from the assistant"))
    async with openai_client(live) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "hello"}]
        )
        completion = raw.parse()
    assert completion.choices[0].message.content == "Hi from the assistant"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == 18
    chat_id = raw.headers["x-chat-id"]
    assert [m.content for m in await live.rt.store.history(ALICE, chat_id)] == ["hello", "Hi from the assistant"]


async def test_openai_client_streaming_with_usage(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(reasoning="thinking", text="streamed reply", chunk_size=3))
    async with openai_client(live) as client:
        stream = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert (text, reasoning) == ("streamed reply", "thinking")
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 18


async def test_a_two_turn_chat_through_x_chat_id(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="first answer"), Reply(text="second answer"))
    async with openai_client(live) as client:
        first = await client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "one"}]
        )
        chat_id = first.headers["x-chat-id"]
        history: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "one"}, {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "two"}]  # fmt: skip
        second = await client.chat.completions.create(
            model="chat",
            messages=history,
            extra_headers={"X-Chat-Id": chat_id},
        )
    assert second.choices[0].message.content == "second answer"
    stored = [m.content for m in await live.rt.store.history(ALICE, chat_id)]
    assert stored == ["one", "first answer", "two", "second answer"]  # the resent history is not stored twice
    assert provider.requests[1].messages[1:] == [*history]


async def test_openai_errors_use_openai_shape(live: Live, provider: FakeProvider) -> None:
    async with openai_client(live) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
        assert "unknown assistant 'nobody'" in missing.value.message
        with pytest.raises(openai.BadRequestError) as tools:
            await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}],
                functions=[{"name": "f", "parameters": {}}],
            )  # fmt: skip
        assert "the legacy `functions` are not supported" in tools.value.message
        provider.enqueue(*[Reply(status=500, error_message="upstream down")] * 3)
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}])
        assert failed.value.status_code == 502 and "upstream down" in failed.value.message
    async with openai.AsyncOpenAI(base_url=live.url + "/v1", api_key="ya_wrong", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()


async def test_models_lists_visible_assistants(live: Live) -> None:
    async with openai_client(live) as client:
        models = [m.id async for m in client.models.list()]
    assert models == ["chat"]  # `private` is for team acme only


async def test_native_run_streams_the_contract_events(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="native reply", chunk_size=4))
    async with (
        live.client() as client,
        client.stream(
            "POST", "/api/assistants/chat/runs", json={"messages": [{"role": "user", "content": "hi"}]}
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        chat_id = response.headers["x-chat-id"]
        events = await sse(response)
    assert events[0]["chat_id"] == chat_id  # the new chat's id, named by the server
    types = [e["type"] for e in events]
    assert types[0] == "stream_start" and types[-1] == "stream_end" and types.count("stream_end") == 1
    assert {e["run_id"] for e in events} == {events[0]["run_id"]}
    assert "".join(e.get("text", "") for e in events if e["type"] == "message_delta") == "native reply"
    assert events[-1]["status"] == "completed" and events[-1]["usage"]["total_tokens"] == 18


async def test_native_run_as_json(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="json reply"))
    async with live.client() as client:
        response = await client.post("/api/assistants/chat/runs?stream=false",
                                     json={"messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    body = response.json()
    assert response.status_code == 200
    assert (body["status"], body["reason"]) == ("completed", "completed")
    assert [(m["role"], m["content"], m["status"]) for m in body["messages"]] == [
        ("user", "hi", "completed"), ("assistant", "json reply", "completed")]  # fmt: skip
    assert set(body) == {"run_id", "chat_id", "status", "reason", "messages", "usage"}


async def test_cancel_and_append_over_http(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="s" * 300, chunk_size=2, delay_s=0.02), Reply(text="after append"))
    body = {"messages": [{"role": "user", "content": "long"}]}
    async with live.client() as client, client.stream("POST", "/api/assistants/chat/runs", json=body) as response:
        chat_id = response.headers["x-chat-id"]
        events: list[dict[str, Any]] = []
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line[6:]))
            if events[-1]["type"] == "message_delta" and len(events) == 4:
                appended = await client.post(f"/api/chats/{chat_id}/append",
                                             json={"messages": [{"role": "user", "content": "and more"}]})  # fmt: skip
                assert appended.status_code == 200 and appended.json()["run_id"] == events[0]["run_id"]
    assert events[-1]["status"] == "completed"
    assert provider.requests[1].messages[-1] == {"role": "user", "content": "and more"}
    provider.enqueue(Reply(text="z" * 300, chunk_size=1, delay_s=0.02))
    body = {"messages": [{"role": "user", "content": "stop me"}], "chat_id": chat_id}
    async with live.client() as client, client.stream("POST", "/api/assistants/chat/runs", json=body) as response:
        events = []
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "message_delta" and len(events) == 3:
                    assert (await client.post(f"/api/chats/{chat_id}/cancel")).json() == {"cancelled": 1}
    assert (events[-1]["status"], events[-1]["reason"]) == ("cancelled", "cancelled")
    async with live.client() as client:
        point = (await client.get(f"/api/chats/{chat_id}/resume")).json()
        assert point["status"] == "cancelled" and point["steps"][0]["type"] == "llm"
        provider.enqueue(Reply(text="resumed"))
        async with client.stream("POST", f"/api/chats/{chat_id}/resume") as response:
            resumed = await sse(response)
        assert resumed[-1]["status"] == "completed"
        assert (await client.get(f"/api/chats/{chat_id}/resume")).status_code == 404


async def test_a_client_that_disconnects_cancels_its_run_which_resumes(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="x" * 500, chunk_size=1, delay_s=0.02))
    body = {"messages": [{"role": "user", "content": "bye"}]}
    async with live.client() as client, client.stream("POST", "/api/assistants/chat/runs", json=body) as response:
        chat_id = response.headers["x-chat-id"]
        async for line in response.aiter_lines():
            if '"message_delta"' in line:
                break  # and hang up

    async def ended() -> bool:
        run = await live.rt.store.latest_run(ALICE, chat_id)
        return run is not None and run.status != "running"

    await wait_until(ended)  # the server saw its client go, and ended the run
    run = await live.rt.store.latest_run(ALICE, chat_id)
    assert run is not None and (run.status, run.reason) == ("cancelled", "cancelled")
    provider.enqueue(Reply(text="back again"))
    async with live.client() as client:
        messages = (await client.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        assert [(m["role"], m["status"]) for m in messages] == [("user", "completed"), ("assistant", "incomplete")]
        point = await client.get(f"/api/chats/{chat_id}/resume")
        assert point.status_code == 200, point.text
        assert (point.json()["run_id"], point.json()["status"]) == (run.id, "cancelled")
        assert [s["type"] for s in point.json()["steps"]] == ["llm"]
        async with client.stream("POST", f"/api/chats/{chat_id}/resume") as response:
            resumed = await sse(response)
        assert (resumed[-1]["status"], resumed[-1]["reason"]) == ("completed", "completed")
        after = (await client.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
        gone = await client.get(f"/api/chats/{chat_id}/resume")
    cut = messages[1]  # the resume goes on from the reply the hang-up cut (tests/server/test_resume_continue.py)
    assert (after[-1]["role"], after[-1]["content"], after[-1]["continues"]) == (
        "assistant", cut["content"] + "back again", cut["message_id"])  # fmt: skip
    assert [m["content"] for m in after].count("bye") == 1  # the resume did not add the user's message again
    assert gone.status_code == 404  # the completed resume cleared the resume point


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "kind"),
    [
        ("POST", "/api/assistants/nobody/runs", {"messages": [{"role": "user", "content": "x"}]}, 404, "not_found"),
        ("POST", "/api/assistants/chat/runs", {"messages": "not a list"}, 400, "invalid_request"),
        (
            "POST",
            "/api/assistants/chat/runs",
            {"messages": [{"role": "robot", "content": "x"}]},
            400,
            "invalid_request",
        ),
        ("POST", "/api/assistants/chat/runs", {"messages": [], "extra": 1}, 400, "invalid_request"),
        (
            "POST",
            "/api/assistants/chat/runs",
            {"messages": [{"role": "user", "content": "x"}], "chat_id": "bad id!"},
            400,
            "invalid_request",
        ),
        ("POST", "/api/chats/nothing/append", {"messages": [{"role": "user", "content": "x"}]}, 404, "not_found"),
        ("GET", "/api/chats/nothing/messages", None, 404, "not_found"),
        ("GET", "/api/nowhere", None, 404, "not_found"),
        ("DELETE", "/api/chats", None, 405, "method_not_allowed"),
        ("PUT", "/api/roles/light", {"connector": "nope"}, 400, "invalid_request"),
    ],
)
async def test_bad_input_gets_a_clear_json_error(
    live: Live, method: str, path: str, body: object, status: int, kind: str
) -> None:
    async with live.client() as client:
        response = await client.request(method, path, json=body)
    assert response.status_code == status
    assert response.json()["error"]["type"] == kind and response.json()["error"]["message"]


async def test_malformed_json_and_huge_bodies(live: Live) -> None:
    async with live.client() as client:
        broken = await client.post("/api/assistants/chat/runs", content=b"{not json",
                                   headers={"Content-Type": "application/json"})  # fmt: skip
        huge = await client.post("/api/assistants/chat/runs",
                                 json={"messages": [{"role": "user", "content": "x" * 100_000}]})  # fmt: skip
    assert (broken.status_code, broken.json()["error"]["type"]) == (400, "invalid_request")
    assert (huge.status_code, huge.json()["error"]["type"]) == (413, "request_too_large")


async def test_append_to_an_idle_chat_is_a_conflict(live: Live, provider: FakeProvider) -> None:
    async with live.client() as client:
        done = await client.post("/api/assistants/chat/runs?stream=false",
                                 json={"messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        chat_id = done.json()["chat_id"]
        response = await client.post(f"/api/chats/{chat_id}/append",
                                     json={"messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert (response.status_code, response.json()["error"]["type"]) == (409, "no_active_run")


async def test_openapi_document_lists_every_route(live: Live) -> None:
    async with live.client() as client:
        paths = set((await client.get("/openapi.json")).json()["paths"])
    assert {"/v1/chat/completions", "/v1/models", "/api/assistants/{assistant_id}/runs", "/api/chats",
            "/api/chats/{chat_id}/cancel", "/api/chats/{chat_id}/append", "/api/chats/{chat_id}/messages",
            "/api/chats/{chat_id}/resume", "/api/chats/{chat_id}/regenerate", "/api/chats/{chat_id}/edit",
            "/api/assistants", "/api/roles/{role}", "/healthz"} <= paths  # fmt: skip


async def test_the_openapi_document_says_what_the_server_answers(live: Live) -> None:
    async with live.client("") as anonymous:
        document = (await anonymous.get("/openapi.json")).json()
    assert not {"HTTPValidationError", "ValidationError"} & set(document["components"]["schemas"])
    schemes = document["components"]["securitySchemes"]
    assert (schemes["HTTPBearer"]["type"], schemes["HTTPBearer"]["scheme"]) == ("http", "bearer")
    # Anthropic's clients send the token as x-api-key: taken on their route only, which answers in their shape.
    assert set(schemes) == {"HTTPBearer", "APIKeyHeader"} and schemes["APIKeyHeader"]["name"] == "x-api-key"
    anthropic = {"/v1/messages"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)  # bad input is a 400, in the error shape below
            if path == "/healthz":
                assert "security" not in operation and set(responses) == {"200"}
                continue
            if path == "/readyz":  # public too, for a load balancer; 503 while the server drains
                assert "security" not in operation and set(responses) == {"200", "503", "500"}
                continue
            keys: list[dict[str, list[str]]] = [
                {"HTTPBearer": []},
                *([{"APIKeyHeader": []}] if path in anthropic else []),
            ]
            assert sorted(map(str, operation["security"])) == sorted(map(str, keys)), (method, path)
            assert {"401", "500"} <= set(responses), (method, path)
            error = {"$ref": "#/components/schemas/" + ("AnthropicErrorBody" if path in anthropic else "ErrorBody")}
            for status, answer in responses.items():
                if status != "200":
                    assert answer["content"] == {"application/json": {"schema": error}}, (method, path, status)
            assert responses["200"]["content"]["application/json"]["schema"]["$ref"].startswith("#/components/")
    streamed = {p for p, ops in document["paths"].items() for op in ops.values()
                if "text/event-stream" in op["responses"]["200"]["content"]}  # fmt: skip
    assert streamed == {"/api/assistants/{assistant_id}/runs", "/api/chats/{chat_id}/resume",
                        "/api/chats/{chat_id}/approvals", "/api/chats/{chat_id}/regenerate",
                        "/api/chats/{chat_id}/edit", "/v1/chat/completions", "/v1/messages",
                        "/v1/responses"}  # fmt: skip
    completions = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"400", "404", "409", "413", "502", "504", "508"} <= set(completions)
    detail = document["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"type", "message", "code"}


async def test_the_server_leaves_the_checks_to_the_run(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> None:
    """A run on one of the caller's chats looks up the chat's owner once, in the pipeline: never in a route too."""
    provider.enqueue(Reply(text="one"), Reply(text="two"), Reply(text="three"))
    rt = make_runtime(tmp_path / "app", CountingStore(store.db), server_files(provider.base_url))
    async with running(rt) as live, live.client() as client:
        first = await client.post("/api/assistants/chat/runs?stream=false", json={"messages": says("hi")})
        chat_id = first.json()["chat_id"]
        CountingStore.checks = 0
        again = {"chat_id": chat_id, "messages": says("again")}
        assert (await client.post("/api/assistants/chat/runs?stream=false", json=again)).json()["status"] == "completed"
        assert CountingStore.checks == 1
        async with openai_client(live) as openai_api:
            answer = await openai_api.chat.completions.create(
                model="chat",
                messages=[{"role": "user", "content": "and once more"}],
                extra_headers={"X-Chat-Id": chat_id},
            )
        assert answer.choices[0].message.content == "three" and CountingStore.checks == 2


def says(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


PYDANTIC_WORDS = ("Input should", "Field required", "Extra inputs", "Value error", "valid dictionary", "[type=")


@pytest.mark.parametrize("body", [[], "text", 5, {"messages": 5}, {"model": ["chat"], "messages": {}}])
async def test_a_body_of_the_wrong_shape_is_told_in_the_apis_words(live: Live, body: Any) -> None:
    """It was pydantic's `Input should be a valid dictionary or object to extract fields from`."""
    routes = [("POST", "/api/assistants/chat/runs"), ("POST", "/v1/chat/completions"), ("PUT", "/api/roles/light"),
              ("PUT", "/api/budgets"), ("POST", "/api/chats/c1/append"), ("PATCH", "/api/chats/c1")]  # fmt: skip
    shaped = isinstance(body, dict)
    async with live.client() as client:
        for method, path in routes:
            response = await client.request(method, path, json=body)
            error = response.json()["error"]
            assert response.status_code in (400, 404), (path, response.text)
            assert not any(words in error["message"] for words in PYDANTIC_WORDS), (path, error)
            if not shaped and response.status_code == 400:
                assert "expected" in error["message"], (path, error)
