"""Framework adapters: LangChain middleware and callbacks, custom-loop helper."""
