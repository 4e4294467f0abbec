"""Framework adapters: LangChain middleware and callbacks (``tortoise_sdk.adapters.langchain``, needs the
``langchain`` extra) and the custom-loop helper (``tortoise_sdk.adapters.loop``)."""

__all__: list[str] = []
