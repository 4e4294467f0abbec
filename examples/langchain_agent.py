"""A LangChain agent with long-term memory and a tool, runnable offline (no network, no API key).

The chat model is a stand-in that supports tool binding, as a real one does: asked to remember
something, it calls the ``remember`` tool (which adds a memory by hand, ``Memory.remember``);
asked a question, it answers from the memory block ``MemoryMiddleware`` put in its system prompt.
Swap ``OfflineChat()`` for a real model, e.g. ``init_chat_model("openai:gpt-4o-mini")``.

    pip install -e '.[langchain]'      # LangChain is an extra
    python examples/langchain_agent.py [--db memory.db]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tortoise_sdk.adapters.langchain import MemoryMiddleware  # first: without the extra, it says what to install

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from tortoise_sdk import Memory


class OfflineChat(BaseChatModel):
    """A chat model that needs no provider: it calls ``remember`` when asked to, else answers from the memory block."""

    @property
    def _llm_type(self) -> str:
        return "offline-example"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> OfflineChat:
        return self  # it knows its one tool; a real model receives the tools' schemas here

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"Done: {last.content}")
        elif "remember that" in last.content.lower():
            fact = last.content.split(":", 1)[-1].strip()
            reply = AIMessage(content="", tool_calls=[{"name": "remember", "args": {"fact": fact}, "id": "call_1"}])
        else:
            system = next((m.content for m in messages if isinstance(m, SystemMessage)), "")
            remembered = re.findall(r'^\d+\. \(memory\) "(.*)" ref:', system, re.M)
            reply = AIMessage(content=f"From memory: {remembered[0]}" if remembered else "I don't know yet.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=str(Path(tempfile.mkdtemp()) / "example.db"))
    args = ap.parse_args()

    with Memory(args.db, namespace="example") as mem:

        @tool
        def remember(fact: str) -> str:
            """Keep a fact about the user for later conversations."""
            return f"remembered {mem.remember(fact).content!r}"

        for session, text in [("monday", "Please remember that: Maya's dog Biscuit is a beagle"),
                              ("friday", "What breed is my dog?")]:
            agent = create_agent(OfflineChat(), [remember], system_prompt="You are Maya's assistant.",
                                 middleware=[MemoryMiddleware(mem, session, extract=False)])
            out = agent.invoke({"messages": [HumanMessage(text)]})
            print(f"[{session}] user: {text}\n[{session}] assistant: {out['messages'][-1].content}")
        print(f"memories: {[m.content for m in mem.memories()]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
