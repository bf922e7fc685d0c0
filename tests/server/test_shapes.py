"""What the OpenAPI document declares is what the routes answer.

Every operation of the app's own document is called for real, in-process: a success and, where the document
declares any, an error. Each answer is checked against the document for its status: the status is declared,
its content type too, and its JSON fits the declared schema — where a field the document does not name fails
as well (the check reads every object of the document as closed). A route added without calls here fails the
last assertion of `test_every_route_answers_as_the_document_says`: add them to one of the phases below.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.support.runtimes import app_files, make_runtime
from tests.support.servers import TENANTS
from tests.support.tools import in_process
from yao_agent.identity import OPERATOR
from yao_agent.server.app import create_app
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel, ToolCall

Validator: Any = jsonschema.Draft202012Validator  # (jsonschema has no type hints)

FILES = {
    "connectors/demo/echo.yml": "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n",
    "mcps/testing.yml": "command: python\nargs: [-m, tests.support.mcp_server]\n",
    "assistants/payer/assistant.yml": "name: Payer\nmcp:\n  servers: [{server: testing, approve: [add]}]\n",
    "assistants/city/assistant.yml": "name: City\noutput:\n  schema: {type: object, required: [name]}\n",
    "knowledge/handbook.yml": "name: Handbook\n",
}
RUNS = "/api/assistants/{assistant_id}/runs"
CHAT = "/api/chats/{chat_id}"
ADD = ToolCall("testing__add", {"a": 2, "b": 3}, id="c1")


def says(text: str, **more: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **more}


def closed(document: dict[str, Any]) -> dict[str, Any]:
    """The document's schemas, each object closed to the fields it names."""
    schemas: dict[str, Any] = copy.deepcopy(document["components"]["schemas"])
    for schema in schemas.values():
        if "properties" in schema:
            schema.setdefault("additionalProperties", False)
    return {"schemas": schemas}


def problems(document: dict[str, Any], method: str, template: str, response: httpx.Response) -> list[str]:
    """How the answer differs from what the document declares for the route and the status."""
    declared = document["paths"][template][method.lower()]["responses"]
    status, kind = str(response.status_code), response.headers.get("content-type", "").split(";")[0]
    if status not in declared:
        return [f"status {status} is not declared (only {', '.join(declared)})"]
    content = declared[status].get("content", {})
    if kind not in content:
        return [f"{status} as {kind} is not declared (only {', '.join(content)})"]
    if kind == "text/event-stream":
        frames = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        last = frames[-1] if frames else ""
        ends = ("stream_end", "message_stop", "response.completed", "response.incomplete", "response.failed")
        return [] if last == "[DONE]" or json.loads(last).get("type") in ends else [f"stream ends {last!r}"]
    schema = {**content[kind]["schema"], "components": closed(document)}
    errors = Validator(schema).iter_errors(response.json())
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message}" for e in errors)


@dataclass
class Api:
    """A client of the app in-process that checks each answer against the document, and notes what it saw."""

    client: httpx.AsyncClient
    runs: Runs
    model: ScriptedModel
    tokens: dict[str, str]
    document: dict[str, Any] = field(default_factory=dict[str, Any])
    seen: set[tuple[str, str, bool]] = field(default_factory=set[tuple[str, str, bool]])  # method, route, 2xx

    async def call(self, method: str, template: str, status: int, *, who: str | None = "alice", body: Any = None,
                   query: str = "", **ids: str) -> Any:  # fmt: skip
        """The answer of `method template` (its path ids given), which must have this `status`: its JSON."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        response = await self.client.request(method, template.format(**ids) + query, json=body, headers=headers)
        assert response.status_code == status, f"{method} {template} → {response.status_code}: {response.text[:500]}"
        found = problems(self.document, method, template, response)
        assert not found, f"{method} {template} → {status}, not as the document says:\n" + "\n".join(found)
        self.seen.add((method.lower(), template, status < 400))
        return response.json() if response.headers["content-type"].startswith("application/json") else response.text


@pytest.fixture
async def api(tmp_path: Path, store: SqlStore) -> AsyncIterator[Api]:
    model = ScriptedModel()
    files = {**app_files(model.base_url), **FILES}
    files["app.yml"] = files["app.yml"].replace("roles:\n", "roles:\n  embedding: fake.model\n")
    rt = in_process(make_runtime(tmp_path / "app", store, files, model=model))
    runs = Runs(rt)
    tokens = {name: await store.create_token(OPERATOR, who) for name, who in TENANTS.items()}
    transport = httpx.ASGITransport(app=create_app(runs))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://app.test", timeout=30) as client:
            api = Api(client, runs, model, tokens)
            api.document = (await client.get("/openapi.json")).json()
            yield api
    finally:  # (the store is the fixture's to close)
        await rt.engines.aclose()
        await rt.tools.aclose()
        await rt.hooks.aclose()


async def runs_and_chats(api: Api) -> str:
    """A run (JSON and SSE), the chat it made listed, read, renamed and looked into; a chat id."""
    api.model.enqueue(Reply(text="hello"), Reply(text="streamed"))
    ran = await api.call("POST", RUNS, 200, body=says("hi"), query="?stream=false", assistant_id="chat")
    chat = ran["chat_id"]
    await api.call("POST", RUNS, 200, body=says("more", chat_id=chat), assistant_id="chat")
    await api.call("POST", RUNS, 404, body=says("hi"), query="?stream=false", assistant_id="nobody")
    await api.call("GET", "/api/chats", 200)
    await api.call("GET", "/api/chats", 400, query="?bogus=1")
    await api.call("GET", CHAT + "/messages", 200, chat_id=chat)
    await api.call("GET", CHAT + "/messages", 404, chat_id="nochat")
    await api.call("GET", CHAT + "/runs/{run_id}", 200, chat_id=chat, run_id=ran["run_id"])
    await api.call("GET", CHAT + "/runs/{run_id}", 404, chat_id=chat, run_id="run_none")
    await api.call("PATCH", CHAT, 200, body={"title": "Renamed"}, chat_id=chat)
    await api.call("PATCH", CHAT, 400, body={"title": ""}, chat_id=chat)
    api.model.enqueue(Reply(text=json.dumps({"name": "Paris"})))
    await api.call("POST", RUNS, 200, body=says("city"), query="?stream=false", assistant_id="city")
    return chat


async def versions(api: Api) -> None:
    """An answer regenerated and a question edited: the runs' answers, the versions listed, the refusals."""
    api.model.enqueue(Reply(text="first"), Reply(text="again"), Reply(text="edited"))
    chat = (await api.call("POST", RUNS, 200, body=says("hi"), query="?stream=false", assistant_id="chat"))["chat_id"]
    await api.call("POST", CHAT + "/regenerate", 200, query="?stream=false", chat_id=chat)
    await api.call("POST", CHAT + "/regenerate", 404, query="?stream=false", chat_id="nochat")
    await api.call("POST", CHAT + "/regenerate", 400, body={"bogus": 1}, chat_id=chat)
    listed = await api.call("GET", CHAT + "/messages", 200, query="?versions=true", chat_id=chat)
    assert [m.get("replaced_by") is not None for m in listed["messages"]] == [False, True, False]
    await api.call("GET", CHAT + "/messages", 400, query="?versions=maybe", chat_id=chat)
    edited = {"message_id": listed["messages"][0]["message_id"], "content": [{"type": "text", "text": "hello"}]}
    await api.call("POST", CHAT + "/edit", 200, body=edited, query="?stream=false", chat_id=chat)
    await api.call("POST", CHAT + "/edit", 400, body=edited, query="?stream=false", chat_id=chat)  # replaced now
    await api.call("POST", CHAT + "/edit", 404, body={**edited, "message_id": "msg_none"}, chat_id=chat)


async def busy_chat(api: Api, chat: str) -> None:
    """Cancel and append: to an idle chat, and to one whose run is under way."""
    await api.call("POST", CHAT + "/cancel", 200, chat_id=chat)
    await api.call("POST", CHAT + "/cancel", 404, chat_id="nochat")
    await api.call("POST", CHAT + "/append", 409, body=says("late"), chat_id=chat)
    api.model.enqueue(Reply(text="s" * 200, chunk_size=2, delay_s=0.01), Reply(text="after the appended"))
    asked = len(api.model.requests)
    running = asyncio.create_task(
        api.call("POST", RUNS, 200, body=says("long", chat_id=chat), query="?stream=false", assistant_id="chat")
    )
    await api.model.wait_for_requests(asked + 1)
    await api.call("POST", CHAT + "/append", 200, body=says("and this"), chat_id=chat)
    await running


async def resumed(api: Api, chat: str) -> None:
    """A run that failed, its resume point, its resume; then the chat deleted."""
    api.model.enqueue(Reply(status=500, error_message="down"), Reply(text="back"))
    failed = await api.call("POST", RUNS, 200, body=says("fail", chat_id=chat), query="?stream=false",
                            assistant_id="chat")  # fmt: skip
    assert failed["status"] == "failed" and failed["error"], failed
    await api.call("GET", CHAT + "/resume", 200, chat_id=chat)
    await api.call("POST", CHAT + "/resume", 200, query="?stream=false", chat_id=chat)
    await api.call("GET", CHAT + "/resume", 404, chat_id=chat)
    await api.call("POST", CHAT + "/resume", 404, query="?stream=false", chat_id=chat)
    await api.call("DELETE", CHAT, 200, chat_id=chat)
    await api.call("DELETE", CHAT, 404, chat_id=chat)


async def approved(api: Api) -> None:
    """A run that waits for a person, the calls it waits for, their approval; the decision in the history."""
    api.model.enqueue(Reply(tool_calls=(ADD,)), Reply(text="5"))
    waited = await api.call("POST", RUNS, 200, body=says("add"), query="?stream=false", assistant_id="payer")
    assert waited["status"] == "waiting" and waited["approvals"], waited
    chat = waited["chat_id"]
    await api.call("GET", CHAT + "/approvals", 200, chat_id=chat)
    decisions = {"decisions": [{"tool_call_id": "c1", "approve": True}]}
    await api.call("POST", CHAT + "/approvals", 200, body=decisions, query="?stream=false", chat_id=chat)
    await api.call("POST", CHAT + "/approvals", 404, body=decisions, query="?stream=false", chat_id=chat)
    await api.call("GET", CHAT + "/approvals", 404, chat_id=chat)
    history = await api.call("GET", CHAT + "/messages", 200, chat_id=chat)
    assert [m["approval"]["approved"] for m in history["messages"] if "approval" in m] == [True]


async def operating(api: Api) -> None:
    """Assistants, roles, usage, budgets, the app's state, health."""
    await api.call("GET", "/api/assistants", 200)
    await api.call("GET", "/api/assistants", 401, who=None)
    await api.call("PUT", "/api/roles/{role}", 200, body={"connector": "demo.echo"}, role="default")
    await api.call("PUT", "/api/roles/{role}", 403, who="carol", body={"connector": "demo.echo"}, role="default")
    await api.call("GET", "/api/roles", 200)
    await api.call("GET", "/api/roles", 401, who=None)
    await api.call("DELETE", "/api/roles/{role}", 200, role="default")
    await api.call("DELETE", "/api/roles/{role}", 404, role="default")
    await api.call("GET", "/api/usage", 200)
    await api.call("GET", "/api/usage", 200, who="bob_admin", query="?by=user")
    await api.call("GET", "/api/usage", 400, query="?by=bogus")
    await api.call("GET", "/api/budgets", 200)
    await api.call("GET", "/api/budgets", 400, query="?bogus=1")
    await api.call("PUT", "/api/budgets", 200, who="bob_admin", body={"per_day": 5})
    await api.call("PUT", "/api/budgets", 403, body={"per_day": 5})
    await api.call("GET", "/api/app", 200, who="bob_admin")
    await api.call("GET", "/api/app", 403, who="carol")
    log = await api.call("GET", "/api/audit", 200, who="bob_admin", query="?action=budget")
    assert [row["action"] for row in log["rows"]] == ["budget.set"]  # (the one set above)
    await api.call("GET", "/api/audit", 403, who="carol")
    await api.call("GET", "/api/audit", 400, who="bob_admin", query="?limit=0")
    await api.call("GET", "/healthz", 200, who=None)
    await api.call("GET", "/readyz", 200, who=None)
    api.runs.process.draining = True
    await api.call("GET", "/readyz", 503, who=None)


async def openai(api: Api) -> None:
    """The OpenAI-compatible routes: models, a completion (whole and streamed), a model that fails."""
    await api.call("GET", "/v1/models", 200)
    await api.call("GET", "/v1/models", 401, who=None)
    api.model.enqueue(Reply(reasoning="thinking", text="hi"), Reply(text="streamed"), Reply(status=500))
    asked = {"model": "chat", **says("hi")}
    await api.call("POST", "/v1/chat/completions", 200, body=asked)
    await api.call("POST", "/v1/chat/completions", 200, body={**asked, "stream": True})
    await api.call("POST", "/v1/chat/completions", 502, body=asked)
    await api.call("POST", "/v1/chat/completions", 404, body={**asked, "model": "nobody"})


async def anthropic(api: Api) -> None:
    """The Anthropic Messages route: a message (whole and streamed), a model that fails, errors in Anthropic's shape."""
    api.model.enqueue(Reply(text="hi"), Reply(text="streamed"), Reply(status=500))
    asked = {"model": "chat", "max_tokens": 100, **says("hi")}
    await api.call("POST", "/v1/messages", 200, body=asked)
    await api.call("POST", "/v1/messages", 200, body={**asked, "stream": True})
    await api.call("POST", "/v1/messages", 502, body=asked)
    await api.call("POST", "/v1/messages", 404, body={**asked, "model": "nobody"})
    await api.call("POST", "/v1/messages", 400, body={**asked, "max_tokens": 0})
    await api.call("POST", "/v1/messages", 401, who=None, body=asked)


async def responses(api: Api) -> None:
    """The Responses API: a response (whole and streamed), continued, read back; refusals and a failed run."""
    api.model.enqueue(Reply(text="hi"), Reply(text="streamed"), Reply(status=500))
    asked = {"model": "chat", "input": "hi"}
    made = await api.call("POST", "/v1/responses", 200, body=asked)
    await api.call("POST", "/v1/responses", 200, body={**asked, "stream": True, "previous_response_id": made["id"]})
    await api.call("POST", "/v1/responses", 409, body={**asked, "previous_response_id": made["id"]})
    await api.call("POST", "/v1/responses", 400, body={**asked, "background": True})
    await api.call("POST", "/v1/responses", 502, body=asked)
    await api.call("GET", "/v1/responses/{response_id}", 200, response_id=made["id"])
    await api.call("GET", "/v1/responses/{response_id}", 404, response_id="resp_run_0.nochat")


async def knowledge(api: Api) -> None:
    """Collections, their documents, search, and embeddings: each as a team admin, a member and an outsider."""
    await api.call("GET", "/api/knowledge", 200)
    await api.call("GET", "/api/knowledge", 401, who=None)
    made = await api.call("POST", "/api/knowledge", 200, who="bob_admin", body={"name": "policies"})
    await api.call("POST", "/api/knowledge", 403, who="bob", body={"name": "other"})
    docs, found = "/api/knowledge/{collection_id}/documents", "/api/knowledge/{collection_id}/search"
    note = {"title": "Parking", "text": "Parking is on level 2.", "metadata": {"dept": "facilities"}}
    added = await api.call("POST", docs, 200, who="bob_admin", body=note, collection_id=made["id"])
    await api.call("POST", docs, 403, who="bob", body=note, collection_id=made["id"])
    await api.call("GET", docs, 200, who="carol", collection_id=made["id"])
    await api.call("GET", docs, 404, collection_id=made["id"])  # alice has no team: it is not there for her
    await api.call("POST", found, 200, who="carol", body={"query": "parking"}, collection_id=made["id"])
    await api.call("POST", found, 404, body={"query": "parking"}, collection_id=made["id"])
    one = docs + "/{document_id}"
    await api.call("DELETE", one, 200, who="bob_admin", collection_id=made["id"], document_id=added["document"]["id"])
    await api.call("DELETE", one, 404, who="bob_admin", collection_id=made["id"], document_id=added["document"]["id"])
    await api.call("POST", "/v1/embeddings", 200, body={"input": ["parking", "leave"]})
    await api.call("POST", "/v1/embeddings", 400, body={"input": [""]})


async def tokens(api: Api) -> None:
    """Tokens listed, made and revoked by a team admin; refused to a member; a foreign team's views refused."""
    await api.call("GET", "/api/tokens", 200, who="bob_admin")
    await api.call("GET", "/api/tokens", 400, query="?bogus=1")
    made = await api.call("POST", "/api/tokens", 200, who="bob_admin", body={"user": "dan", "expires_in_days": 7})
    await api.call("POST", "/api/tokens", 403, who="carol", body={"user": "dan"})
    await api.call("POST", "/api/tokens", 400, who="bob_admin", body={"user": "dan", "expires_in_days": 0})
    await api.call("DELETE", "/api/tokens/{token_id}", 200, who="bob_admin", token_id=made["id"])
    await api.call("DELETE", "/api/tokens/{token_id}", 404, who="bob_admin", token_id=made["id"])
    await api.call("GET", "/api/usage", 403, who="bob_admin", query="?by=team")
    await api.call("GET", "/api/budgets", 403, who="bob_admin", query="?team=beta")


async def test_every_route_answers_as_the_document_says(api: Api) -> None:
    await knowledge(api)
    await tokens(api)
    chat = await runs_and_chats(api)
    await versions(api)
    await busy_chat(api, chat)
    await resumed(api, chat)
    await approved(api)
    await openai(api)
    await anthropic(api)
    await responses(api)
    await operating(api)  # last: it drains the server
    operations = {(method, path): op for path, item in api.document["paths"].items() for method, op in item.items()}
    errs = {
        key for key, op in operations.items() if any(int(status) < 500 for status in op["responses"] if status != "200")
    }
    missing = sorted({(m, p) for m, p in operations if (m, p, True) not in api.seen}
                     | {(m, p) for m, p in errs if (m, p, False) not in api.seen})  # fmt: skip
    assert not missing, f"routes never called here (for a success, or an error they declare): {missing}"


def test_a_field_the_document_does_not_name_is_refused() -> None:
    """The check is no formality: an answer with one more field, or one too few, fails it."""
    document = {"paths": {"/x": {"get": {"responses": {"200": {"content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/X"}}}}}}}},
        "components": {"schemas": {"X": {"type": "object", "properties": {"a": {"type": "integer"}},
                                         "required": ["a"]}}}}  # fmt: skip

    def answer(body: object) -> list[str]:
        return problems(document, "GET", "/x", httpx.Response(200, json=body))

    assert answer({"a": 1}) == []
    assert answer({"a": 1, "b": 2}) == ["(body): Additional properties are not allowed ('b' was unexpected)"]
    assert answer({}) == ["(body): 'a' is a required property"]
    assert problems(document, "GET", "/x", httpx.Response(404, json={})) == ["status 404 is not declared (only 200)"]
