"""Knowledge over HTTP (CONTRACT §9.1): collections, their documents, search, and `/v1/embeddings`.

Who may see or change a collection is the knowledge service's to decide (yao_agent/knowledge/library.py),
and the store's queries hold to it again: a collection of another team is a 404 on every route, as a chat
of another user is. These routes read the request and render.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import UploadFile

from yao_agent import shapes
from yao_agent.errors import UsageError
from yao_agent.knowledge.ingest import Added, Upload
from yao_agent.knowledge.library import Library
from yao_agent.knowledge.references import numbered
from yao_agent.knowledge.search import Ask
from yao_agent.messages import iso_time
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.errors import InvalidParam
from yao_agent.server.native import runs_of
from yao_agent.store.knowledge import CollectionRecord, DocumentRecord

router = APIRouter()
Meta = dict[Annotated[str, Field(min_length=1, max_length=64)], Annotated[str, Field(max_length=512)]]


class CollectionBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=64, description="letters, digits, '_' and '-': the id is <team>:<name>")
    embedding: str | None = Field(None, description="a connector id or use::<role>; omitted: full text only")


class TextDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    title: str = Field(min_length=1, max_length=500)
    text: str = Field(min_length=1)
    metadata: Meta = Field(default_factory=dict[str, str])


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    query: str = Field(min_length=1, max_length=2000)
    top_k: int = Field(6, ge=1, le=50)
    filter: Meta = Field(default_factory=dict[str, str], description="metadata every result's document has")


class EmbeddingsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: str | list[Annotated[str, Field(max_length=32_000)]] = Field(description="a text, or a list of texts")
    model: str | None = Field(None, description="ignored: the caller's `embedding` role decides")
    encoding_format: Literal["float", "base64"] = Field("float", description="base64: little-endian float32")
    dimensions: int | None = None
    user: str | None = None


def library(request: Request) -> Library:
    return runs_of(request).rt.knowledge


def collection_out(record: CollectionRecord) -> shapes.CollectionOut:
    return {"id": record.id, "name": record.name, "team_id": record.team_id or None, "origin": record.origin,
            "embedding": record.embedding or None, "documents": record.documents, "chunks": record.chunks}  # fmt: skip


def document_out(record: DocumentRecord) -> shapes.DocumentOut:
    return {"id": record.id, "collection": record.collection_id, "title": record.title, "source": record.source,
            "content_hash": record.content_hash, "metadata": dict(record.metadata), "chunks": record.chunk_count,
            "created_at": iso_time(record.created_at), "updated_at": iso_time(record.updated_at)}  # fmt: skip


def added_out(added: Added) -> shapes.AddedOut:
    return {"document": document_out(added.document), "unchanged": added.unchanged, "embedded": added.embedded,
            "reused": added.reused}  # fmt: skip


@router.get("/api/knowledge", tags=["knowledge"], response_model=None,
            responses=doc.answers(shapes.CollectionsOut, 401))  # fmt: skip
async def collections(request: Request, who: Caller) -> shapes.CollectionsOut:
    """The collections the caller may search: the app's their access admits, and their team's."""
    return {"data": [collection_out(c) for c in await library(request).collections(who)]}


@router.post("/api/knowledge", tags=["knowledge"], response_model=None,
             responses=doc.answers(shapes.CollectionOut, 400, 401, 403, 409, 413))  # fmt: skip
async def create(request: Request, who: Caller, body: CollectionBody) -> shapes.CollectionOut:
    """A collection of the caller's team, `<team>:<name>` (team admins)."""
    return collection_out(await library(request).create(who, body.name, body.embedding))


@router.get("/api/knowledge/{collection_id}/documents", tags=["knowledge"], response_model=None,
            responses=doc.answers(shapes.DocumentsOut, 401, 404))  # fmt: skip
async def documents(request: Request, who: Caller, collection_id: str) -> shapes.DocumentsOut:
    return {"data": [document_out(d) for d in await library(request).documents(who, collection_id)]}


@router.post("/api/knowledge/{collection_id}/documents", tags=["knowledge"], response_model=None,
             responses=doc.answers(shapes.AddedOut, 400, 401, 403, 404, 413))  # fmt: skip
async def add(request: Request, who: Caller, collection_id: str) -> shapes.AddedOut:
    """A document: a multipart `file` (.md .txt .html .pdf; with `title` and `metadata` (JSON) fields if
    wanted), or JSON `{title, text, metadata?}`. The same content again does nothing (`unchanged`); a file
    of the same name replaces the one uploaded before, re-embedding only the chunks that changed."""
    kind = request.headers.get("content-type", "")
    upload = await _from_form(request) if kind.startswith("multipart/form-data") else await _from_json(request)
    return added_out(await library(request).add(who, collection_id, upload))


async def _from_form(request: Request) -> Upload:
    async with request.form(max_files=1, max_fields=8) as form:
        given = form.get("file")
        if not isinstance(given, UploadFile) or not given.filename:
            raise InvalidParam(
                "file: expected one uploaded file (multipart field `file`, with a file name)", param="file"
            )
        data = await given.read()
        name, title, meta = given.filename, form.get("title"), form.get("metadata")
    metadata: Mapping[str, Any] = {}
    if isinstance(meta, str) and meta.strip():
        try:
            parsed = json.loads(meta)
        except ValueError:
            raise InvalidParam("metadata: expected a JSON object of text values", param="metadata") from None
        if not isinstance(parsed, dict):
            raise InvalidParam("metadata: expected a JSON object of text values", param="metadata")
        metadata = cast(dict[str, Any], parsed)
    if not all(isinstance(v, str) for v in metadata.values()):
        raise InvalidParam("metadata: expected a JSON object of text values", param="metadata")
    named = name.replace("\\", "/").rsplit("/", 1)[-1]  # a browser may send a path: the name is what counts
    return Upload(named, data, title if isinstance(title, str) and title.strip() else None,
                  {k: str(v) for k, v in metadata.items()}, source=f"upload:{named}")  # fmt: skip


async def _from_json(request: Request) -> Upload:
    try:
        body = TextDocument.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False), body=None) from None
    return Upload(f"{body.title}.md", body.text.encode(), body.title, body.metadata)


@router.delete("/api/knowledge/{collection_id}/documents/{document_id}", tags=["knowledge"], response_model=None,
               responses=doc.answers(shapes.DocumentDeletedOut, 401, 403, 404))  # fmt: skip
async def delete(request: Request, who: Caller, collection_id: str, document_id: str) -> shapes.DocumentDeletedOut:
    await library(request).delete(who, collection_id, document_id)
    return {"id": document_id, "deleted": True}


@router.post("/api/knowledge/{collection_id}/search", tags=["knowledge"], response_model=None,
             responses=doc.answers(shapes.ReferencesOut, 400, 401, 404, 413))  # fmt: skip
async def search(request: Request, who: Caller, collection_id: str, body: SearchBody) -> shapes.ReferencesOut:
    """The references a run would be given for `query` from this collection."""
    knowledge = library(request)
    await knowledge.collection(who, collection_id)  # 404 for one the caller cannot see
    found = await knowledge.search(who, [collection_id], Ask(body.query, body.top_k, 0.0, body.filter))
    return {"references": numbered(found)}


@router.post("/v1/embeddings", tags=["openai"], response_model=None,
             responses=doc.answers(shapes.EmbeddingsOut, 400, 401, 413, 502))  # fmt: skip
async def embeddings(request: Request, who: Caller, body: EmbeddingsBody) -> shapes.EmbeddingsOut:
    """OpenAI's embeddings API, served by the caller's `embedding` role."""
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts or len(texts) > 2048 or not all(t.strip() for t in texts):
        raise InvalidParam("input: expected 1-2048 non-empty texts", param="input")
    if body.dimensions is not None:
        raise UsageError("dimensions: not supported (the embedding connector's model decides its size)")
    got = await library(request).embed_for_caller(who, texts)
    form = body.encoding_format
    data: list[shapes.EmbeddingOut] = [{"object": "embedding", "index": i, "embedding": _encoded(v, form)}
                                       for i, v in enumerate(got.vectors)]  # fmt: skip
    return {"object": "list", "data": data, "model": got.model,
            "usage": {"prompt_tokens": got.input_tokens, "total_tokens": got.input_tokens}}  # fmt: skip


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    """OpenAI's two forms: a list of floats, or base64 of little-endian float32 (its SDK asks for this)."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return list(vector)
