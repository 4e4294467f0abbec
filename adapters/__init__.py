"""Framework and host adapters, each a client of ``Memory`` only.

- ``langchain``: LangChain middleware and callbacks (the ``langchain`` extra);
- ``loop``: the custom-loop helper;
- ``mcp_server``: the MCP server behind ``tortoise mcp`` (the ``mcp`` extra);
- ``claude_code``: the Claude Code hooks behind ``tortoise hook`` / ``tortoise hooks``;
- ``openai_agents``: the OpenAI Agents SDK session, input filter and run hooks (the ``openai-agents`` extra).
"""

__all__: list[str] = []
