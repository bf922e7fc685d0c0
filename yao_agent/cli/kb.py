"""`yao-agent kb …`: the operator's knowledge commands (CONTRACT §9.1) — list, sync, add, docs, rm, search,
create. The operator sees every app collection, and a team's collections when the team is named (`--team`,
or the id itself: `acme:policies` is team acme's)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

from yao_agent.cli.common import Commands, app_of, open_store, printable, run_async
from yao_agent.errors import Exit, UsageError
from yao_agent.identity import OPERATOR

if TYPE_CHECKING:
    from yao_agent.knowledge.library import Library
    from yao_agent.shapes import ReferenceOut

T = TypeVar("T")


def _with_library(args: argparse.Namespace, work: Callable[[Library], Awaitable[T]]) -> T:
    import time

    from yao_agent.connectors import Engines
    from yao_agent.ids import RandomIds
    from yao_agent.knowledge.library import Library

    app = app_of(args)

    async def run() -> T:
        store, engines = await open_store(args, app), Engines()
        try:
            return await work(Library(app, store, engines, store, ids=RandomIds(), clock=time.time))
        finally:
            await engines.aclose()
            await store.aclose()

    return run_async(run())


def _team(args: argparse.Namespace, collection_id: str | None = None) -> str | None:
    if getattr(args, "team", None):
        return args.team
    if collection_id is not None and ":" in collection_id:
        return collection_id.rsplit(":", 1)[0]  # `<team>:<name>` says whose it is
    return None


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    found = _with_library(args, lambda kb: kb.collections(OPERATOR, _team(args)))
    if not found:
        print("no collections (declare one in knowledge/<name>.yml, or: yao-agent kb create NAME --team T)", file=out)
    for c in found:
        embedding = c.embedding or "full text only"
        print(f"{printable(c.id)}\t{printable(c.name)}\t{c.documents} documents, {c.chunks} chunks\t{embedding}",
              file=out)  # fmt: skip
    return Exit.OK


def cmd_sync(args: argparse.Namespace, out: TextIO) -> int:
    for synced in _with_library(args, lambda kb: kb.sync(args.id)):
        for source in synced.added:
            print(f"{synced.collection}: indexed {printable(source)}", file=out)
        said = f"{len(synced.added)} indexed, {synced.unchanged} unchanged, {synced.removed} removed"
        print(f"{synced.collection}: {said}" + (f", {synced.embedded} re-embedded" if synced.embedded else ""),
              file=out)  # fmt: skip
    return Exit.OK


def cmd_add(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.knowledge.ingest import Upload

    metadata = _pairs(args.meta)
    uploads: list[Upload] = []
    for given in args.paths:
        path = Path(given)
        if not path.is_file():
            raise UsageError(f"{given}: no such file (expected a .md, .txt, .html or .pdf file)")
        uploads.append(Upload(path.name, path.read_bytes(), args.title, metadata, source=f"upload:{path.name}"))

    async def work(kb: Library) -> list[str]:
        said: list[str] = []
        for upload in uploads:
            added = await kb.add(OPERATOR, args.id, upload, _team(args, args.id))
            state = (
                "unchanged" if added.unchanged else f"{added.document.chunk_count} chunks, {added.embedded} embedded"
            )
            said.append(f"{printable(upload.name)} → {added.document.id} ({state})")
        return said

    for line in _with_library(args, work):
        print(line, file=out)
    return Exit.OK


def cmd_docs(args: argparse.Namespace, out: TextIO) -> int:
    found = _with_library(args, lambda kb: kb.documents(OPERATOR, args.id, _team(args, args.id)))
    for d in found:
        meta = " ".join(f"{k}={v}" for k, v in d.metadata.items())
        print(
            f"{d.id}\t{printable(d.title)}\t{d.chunk_count} chunks\t{printable(d.source)}\t{printable(meta)}", file=out
        )
    if not found:
        print(f"collection {args.id} has no documents", file=out)
    return Exit.OK


def cmd_rm(args: argparse.Namespace, out: TextIO) -> int:
    _with_library(args, lambda kb: kb.delete(OPERATOR, args.id, args.doc_id, _team(args, args.id)))
    print(f"deleted {args.doc_id} from {args.id}", file=out)
    return Exit.OK


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.knowledge.references import numbered, where
    from yao_agent.knowledge.search import Ask

    ask = Ask(args.query, args.top_k, 0.0, _pairs(args.filter))

    async def work(kb: Library) -> list[ReferenceOut]:
        await kb.collection(OPERATOR, args.id, _team(args, args.id))
        return numbered(await kb.search(OPERATOR, [args.id], ask, _team(args, args.id)))

    found = _with_library(args, work)
    if args.json:
        print(json.dumps({"references": found}, ensure_ascii=False), file=out)
        return Exit.OK
    for r in found:
        text = " ".join(str(r["text"]).split())
        print(f"[{r['n']}] {printable(where(r))}  (score {r['score']})\n    {printable(text[:300])}", file=out)
    if not found:
        print("nothing found", file=out)
    return Exit.OK


def cmd_create(args: argparse.Namespace, out: TextIO) -> int:
    made = _with_library(args, lambda kb: kb.create(OPERATOR, args.name, args.embedding, args.team))
    print(f"created {made.id}" + (f" (embedding: {made.embedding})" if made.embedding else " (full text only)"),
          file=out)  # fmt: skip
    return Exit.OK


def _pairs(given: list[str] | None) -> dict[str, str]:
    return dict(_pair(text) for text in given or [])


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"{text!r}: expected key=value")
    return key, value


def add_commands(cmds: Commands) -> None:
    about = "Knowledge collections: what assistants search and cite."
    actions = cmds.family("kb", "knowledge: collections, documents, search", about)
    actions.command("list", cmd_list, "list collections: the app's, and a team's with --team").add_argument(
        "--team", metavar="T", help="also the collections of team T"
    )
    p = actions.command("sync", cmd_sync, "index the `sources` of the app's collections (or of one)")
    p.add_argument("id", nargs="?", help="one app collection (default: all)")
    p = actions.command("add", cmd_add, "add files to a collection (the same content again does nothing)")
    p.add_argument("id")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--title", help="the document's title (default: its own)")
    p.add_argument("--meta", action="append", metavar="K=V", help="metadata (repeatable)")
    p.add_argument("--team", metavar="T", help="the team whose collection it is (default: from the id)")
    p = actions.command("docs", cmd_docs, "list a collection's documents")
    p.add_argument("id")
    p.add_argument("--team", metavar="T")
    p = actions.command("rm", cmd_rm, "delete a document from a collection")
    p.add_argument("id")
    p.add_argument("doc_id")
    p.add_argument("--team", metavar="T")
    p = actions.command("search", cmd_search, "search a collection as a run would")
    p.add_argument("id")
    p.add_argument("query")
    p.add_argument("--top-k", type=int, default=6, dest="top_k")
    p.add_argument("--filter", action="append", metavar="K=V", help="metadata the documents must have (repeatable)")
    p.add_argument("--json", action="store_true", help="print the references as JSON")
    p.add_argument("--team", metavar="T")
    p = actions.command("create", cmd_create, "create a team collection <team>:<name>")
    p.add_argument("name")
    p.add_argument("--team", metavar="T", required=True)
    p.add_argument("--embedding", help="a connector id or use::<role> (default: full text only)")
