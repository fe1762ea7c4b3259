"""Where the LLM lives and how much of it one trace may use: the settings every LLM method takes."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "OTEL_BLAME_MODEL"
DEFAULT_MODEL = "gpt-4o"


class LLMSettings(BaseModel):
    """Any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp server).

    ``api_key`` is a SecretStr so it never shows in logs, reprs or dumps.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default=None, description="e.g. http://localhost:11434/v1; None = OpenAI")
    api_key: SecretStr | None = None
    model: str = DEFAULT_MODEL
    timeout: float = Field(default=60.0, gt=0, description="seconds per HTTP request")
    max_retries: int = Field(default=3, ge=0, description="retries on 429, 5xx and timeouts")
    backoff_seconds: float = Field(default=1.0, ge=0, description="first retry delay; doubles each time")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_output_tokens: int = Field(default=512, gt=0)
    token_budget: int = Field(default=400_000, gt=0, description="input+output tokens one trace may use")
    context_tokens: int = Field(default=60_000, gt=500, description="input tokens one request may hold")
    max_step_chars: int = Field(default=6_000, gt=200, description="longer steps keep head and tail")
    cache_dir: Path | None = Field(default=None, description="on-disk response cache; None disables it")
    concurrency: int = Field(default=4, ge=1, description="requests in flight at once, process-wide")

    @property
    def configured(self) -> bool:
        """An endpoint or a key is set: something to call (OpenAI itself needs the key)."""
        return self.base_url is not None or self.api_key is not None

    @classmethod
    def from_env(cls, **overrides: object) -> LLMSettings:
        """Settings from OPENAI_BASE_URL / OPENAI_API_KEY / OTEL_BLAME_MODEL; explicit values win."""
        values: dict[str, object] = {}
        if os.environ.get(ENV_BASE_URL):
            values["base_url"] = os.environ[ENV_BASE_URL]
        if os.environ.get(ENV_API_KEY):
            values["api_key"] = SecretStr(os.environ[ENV_API_KEY])
        if os.environ.get(ENV_MODEL):
            values["model"] = os.environ[ENV_MODEL]
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)  # type: ignore[arg-type]
