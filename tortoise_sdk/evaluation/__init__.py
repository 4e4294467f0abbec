"""Measuring memory quality: ``tortoise eval locomo`` (LoCoMo answer accuracy with a judge, recall, cost)."""

from .locomo import CATEGORIES, Conversation, Question, load_conversations
from .report import render_markdown
from .runner import EvalSettings, run_locomo

__all__ = ("CATEGORIES", "Conversation", "EvalSettings", "Question", "load_conversations", "render_markdown",
           "run_locomo")
