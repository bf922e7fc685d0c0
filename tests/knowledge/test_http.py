"""Knowledge over real HTTP (CONTRACT §9.1): a team admin uploads a PDF and a member's next question is
answered with `[n]` citations whose chunks the chat shows; another team's member, or a caller without a
team, gets nothing of it by any route; the same file again does no work; bad input is a 400/413 naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.pdfs import pdf
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, assert_error, client_for, running, says, server_files
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

FACILITIES = pdf(["Facilities", "Parking for Acme staff is on level 2 of the tower, bays 200 to 260."],
                 title="Facilities guide")  # fmt: skip
OTHERS = {"eve": Identity("eve", "beta"), "eve_admin": Identity("eve", "beta", admin=True)}


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    files = server_files(provider.base_url)
    files |= {
        "app.yml": "roles:\n  default: fake.model\n  embedding: fake.embed\nserver: {max_upload_bytes: 4096}\n",
        "connectors/fake/embed.yml": f"type: openai\nmodel: text-embedding-3-small\nbase_url: {provider.base_url}\n"
                                     "api_key: sk-x\n",
        "knowledge/handbook.yml": "name: Handbook\n",
        "assistants/kb/assistant.yml": "name: KB\nsearch: {knowledge: [team, handbook]}\n",
    }  # fmt: skip
    async with running(make_runtime(tmp_path / "app", store, files)) as served:
        for name, who in OTHERS.items():
            served.tokens[name] = await served.rt.store.create_token(OPERATOR, who)
        yield served


def as_(live: Live, who: str) -> httpx.AsyncClient:
    return client_for(live, live.tokens[who])


async def policies(live: Live) -> str:
    """acme's collection `policies`, embedded through the `embedding` role, with the facilities PDF in it."""
    async with as_(live, "bob_admin") as admin:
        made = await admin.post("/api/knowledge", json={"name": "policies", "embedding": "use::embedding"})
        assert made.status_code == 200, made.text
        assert made.json() == {"id": "acme:policies", "name": "policies", "team_id": "acme", "origin": "team",
                               "embedding": "use::embedding", "documents": 0, "chunks": 0}  # fmt: skip
        added = await admin.post("/api/knowledge/acme:policies/documents",
                                 files={"file": ("facilities.pdf", FACILITIES, "application/pdf")},
                                 data={"metadata": '{"dept": "facilities"}'})  # fmt: skip
        assert added.status_code == 200, added.text
        body = added.json()
        assert body["unchanged"] is False and body["embedded"] >= 1 and body["document"]["title"] == "Facilities guide"
        assert body["document"]["metadata"] == {"dept": "facilities"}
        return str(body["document"]["id"])


def embedding_requests(provider: FakeProvider) -> int:
    return sum(1 for r in provider.requests if r.path.endswith("/embeddings"))


async def test_a_member_is_answered_with_citations_from_the_teams_pdf(live: Live, provider: FakeProvider) -> None:
    await policies(live)
    embedded = embedding_requests(provider)
    async with as_(live, "bob_admin") as admin:  # the same file again: nothing is parsed or embedded
        again = await admin.post("/api/knowledge/acme:policies/documents",
                                 files={"file": ("facilities.pdf", FACILITIES, "application/pdf")},
                                 data={"metadata": '{"dept": "facilities"}'})  # fmt: skip
        assert again.json()["unchanged"] is True and embedding_requests(provider) == embedded
    provider.enqueue(Reply(text="Park on level 2 [1]."))
    async with as_(live, "bob") as bob:
        ran = await bob.post("/api/assistants/kb/runs?stream=false", json={"messages": says("Where do I park?")})
        assert ran.status_code == 200, ran.text
        chat = ran.json()["chat_id"]
        messages = (await bob.get(f"/api/chats/{chat}/messages")).json()["messages"]
    chat_request = next(r for r in provider.requests if r.path.endswith("/chat/completions"))
    assert any("level 2 of the tower" in str(m["content"]) for m in chat_request.messages if m["role"] == "system")
    reply = messages[-1]
    assert reply["role"] == "assistant" and reply["citations"] == [1] and reply["unknown_citations"] == []
    cited = reply["references"][0]
    assert (cited["collection"], cited["title"], cited["n"]) == ("acme:policies", "Facilities guide", 1)
    assert "bays 200 to 260" in cited["text"] and cited["metadata"] == {"dept": "facilities"}


async def test_another_team_and_a_caller_without_one_get_nothing_by_any_route(
    live: Live, provider: FakeProvider
) -> None:
    document = await policies(live)
    for who in ("eve", "eve_admin", "alice"):
        async with as_(live, who) as other:
            listed = (await other.get("/api/knowledge")).json()["data"]
            assert [c["id"] for c in listed] == ["handbook"], who
            for response in (
                await other.get("/api/knowledge/acme:policies/documents"),
                await other.post("/api/knowledge/acme:policies/search", json={"query": "parking"}),
                await other.post("/api/knowledge/acme:policies/documents", json={"title": "x", "text": "planted"}),
                await other.delete(f"/api/knowledge/acme:policies/documents/{document}"),
            ):
                assert_error(response, 404, "not_found")
    provider.enqueue(Reply(text="no idea"))
    async with as_(live, "eve") as eve:
        ran = await eve.post("/api/assistants/kb/runs?stream=false", json={"messages": says("Where do I park?")})
        assert ran.status_code == 200, ran.text
    chat_request = [r for r in provider.requests if r.path.endswith("/chat/completions")][-1]
    assert "level 2" not in str(chat_request.messages)
    async with as_(live, "carol") as carol:  # a member of acme sees it, and reads it
        found = (await carol.post("/api/knowledge/acme:policies/search", json={"query": "parking bays"})).json()
        assert found["references"][0]["document_id"] == document


async def test_only_a_team_admin_changes_the_teams_collections(live: Live) -> None:
    document = await policies(live)
    async with as_(live, "bob") as bob:
        assert_error(await bob.post("/api/knowledge", json={"name": "mine"}), 403)
        assert_error(await bob.post("/api/knowledge/acme:policies/documents", json={"title": "t", "text": "x"}), 403)
        assert_error(await bob.delete(f"/api/knowledge/acme:policies/documents/{document}"), 403)
    async with as_(live, "alice") as alice:
        assert_error(await alice.post("/api/knowledge", json={"name": "mine"}), 403)
    async with as_(live, "bob_admin") as admin:
        assert_error(await admin.post("/api/knowledge/handbook/documents", json={"title": "t", "text": "x"}), 403)
        assert_error(await admin.post("/api/knowledge", json={"name": "policies"}), 409)
        deleted = await admin.delete(f"/api/knowledge/acme:policies/documents/{document}")
        assert deleted.json() == {"id": document, "deleted": True}
        assert (await admin.post("/api/knowledge/acme:policies/search", json={"query": "parking"})).json() == {
            "references": []}  # fmt: skip
        assert_error(await admin.delete(f"/api/knowledge/acme:policies/documents/{document}"), 404)


async def test_bad_input_is_a_clear_400_or_413(live: Live) -> None:
    await policies(live)
    async with as_(live, "bob_admin") as admin:
        url = "/api/knowledge/acme:policies/documents"
        exe = {"file": ("tool.exe", b"MZ\x90", "application/x-msdos")}
        wrong = assert_error(await admin.post(url, files=exe), 400)
        assert "tool.exe" in wrong["message"] and ".pdf" in wrong["message"]
        garbage = {"file": ("x.pdf", b"%PDF-1.4 garbage", "application/pdf")}
        broken = assert_error(await admin.post(url, files=garbage), 400)
        assert "x.pdf" in broken["message"]
        meta = assert_error(await admin.post(url, files={"file": ("a.md", b"# A\n\ntext\n")}, data={"metadata": "[1]"}),
                            400)  # fmt: skip
        assert "metadata" in meta["message"]
        assert_error(await admin.post(url, json={"title": "no text"}), 400)
        assert_error(await admin.post(url, files={"file": ("big.md", b"word " * 2000)}), 413)
        assert_error(await admin.post("/api/knowledge/acme:policies/search", json={"query": "x", "top_k": 0}), 400)
        assert_error(await admin.post("/api/knowledge", json={"name": "has space"}), 400)


async def test_search_filters_by_metadata(live: Live) -> None:
    await policies(live)
    async with as_(live, "bob_admin") as admin:
        for dept, text in (("hr", "Holiday requests go to HR."), ("it", "Holiday laptops need the VPN.")):
            note = {"title": f"{dept} note", "text": text, "metadata": {"dept": dept}}
            added = await admin.post("/api/knowledge/acme:policies/documents", json=note)
            assert added.status_code == 200, added.text
        found = await admin.post("/api/knowledge/acme:policies/search",
                                 json={"query": "holiday", "filter": {"dept": "it"}})  # fmt: skip
        assert [r["title"] for r in found.json()["references"]] == ["it note"]
        listed = (await admin.get("/api/knowledge/acme:policies/documents")).json()["data"]
        assert sorted(d["title"] for d in listed) == ["Facilities guide", "hr note", "it note"]


async def test_embeddings_are_served_by_the_callers_embedding_role(live: Live) -> None:
    client = openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=live.tokens["bob"], max_retries=0)
    got = await client.embeddings.create(model="anything", input=["annual leave", "parking"])
    assert [d.index for d in got.data] == [0, 1] and len(got.data[0].embedding) == 64
    assert got.model == "text-embedding-3-small" and got.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError):
        await client.embeddings.create(model="anything", input=[""])
    await client.close()
