"""The LLM client every LLM method uses (the OpenAI SDK against any compatible endpoint)."""

from __future__ import annotations

from otel_blame.attribution.llm_settings import LLMSettings

__all__ = ["LLMSettings"]
