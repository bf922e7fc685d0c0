"""LangChain's `ChatOpenAI.with_structured_output` against the server: the typed object comes back,
whether the model answers right away or after the server had it correct an answer (CONTRACT §4.7)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply


class Forecast(BaseModel):
    city: str
    celsius: float


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, server_files(provider.base_url))) as served:
        yield served


async def ask(live: Live, question: str) -> object:
    """The question to `chat` through LangChain's structured-output runnable for `Forecast`."""
    model = ChatOpenAI(model="chat", base_url=live.url + "/v1", api_key=SecretStr(live.tokens["alice"]), max_retries=0)
    # langchain types the runnable with bare generics: held as Any here
    structured: Any = model.with_structured_output(Forecast)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    answer: object = await structured.ainvoke(question)
    return answer


async def test_with_structured_output_gets_the_typed_object(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text=json.dumps({"city": "Lima", "celsius": 19})))
    assert await ask(live, "What is the weather in Lima?") == Forecast(city="Lima", celsius=19)
    sent = provider.requests[0].body["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["required"] == ["city", "celsius"]


async def test_with_structured_output_after_a_correction(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text='{"city": "Lima", "celsius": "mild"}'), Reply(text='{"city": "Lima", "celsius": 19.5}'))
    assert await ask(live, "Weather in Lima?") == Forecast(city="Lima", celsius=19.5)
    assert len(provider.requests) == 2 and "celsius" in json.dumps(provider.requests[1].body["messages"][-1])
