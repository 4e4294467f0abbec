"""Framework adapters: LangChain middleware and callbacks (``tortoise_sdk.adapters.langchain``, needs the
``langchain`` extra), the custom-loop helper (``tortoise_sdk.adapters.loop``) and the MCP server
(``tortoise_sdk.adapters.mcp_server``, needs the ``mcp`` extra)."""

__all__: list[str] = []
