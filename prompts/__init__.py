"""Prompt templates, one per pipeline stage (shipped in the wheel)."""
