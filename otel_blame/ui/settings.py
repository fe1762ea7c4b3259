"""What the web UI needs to know: auth, upload limit, trace links and which LLM (if any) it may use."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from otel_blame.attribution.llm_settings import LLMSettings

MiB = 1024 * 1024


class UISettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    auth_token: SecretStr | None = Field(
        default=None, description="pages and API need it: API as 'Authorization: Bearer', pages via sign-in"
    )
    max_upload_bytes: int = Field(default=16 * MiB, gt=0, description="larger uploads are refused (413)")
    jaeger_url_template: str | None = Field(
        default=None, description="e.g. http://jaeger:16686/trace/{trace_id}; no link when unset"
    )
    tempo_url_template: str | None = Field(
        default=None, description="e.g. a Grafana Explore URL with {trace_id}; no link when unset"
    )
    llm: LLMSettings | None = Field(
        default=None, description="the endpoint LLM methods use; None: only offline methods are offered"
    )
    secure_cookies: bool = Field(default=False, description="mark cookies Secure (serve the UI over HTTPS)")
    session_seconds: int = Field(default=12 * 3600, gt=0, description="how long a sign-in lasts")
    count_undecided: bool = Field(
        default=False,
        description="the culprits page and /api/culprits count undecided verdicts too by default "
        "(`serve`: alerting.count_undecided); ?undecided=1 or 0 overrides it per request",
    )

    def trace_links(self, trace_id: str) -> list[tuple[str, str]]:
        """(label, URL) for each configured trace viewer."""
        links = []
        for label, template in (("Jaeger", self.jaeger_url_template), ("Tempo", self.tempo_url_template)):
            if template:
                links.append((label, template.replace("{trace_id}", trace_id)))
        return links

    @property
    def llm_configured(self) -> bool:
        return self.llm is not None and (self.llm.base_url is not None or self.llm.api_key is not None)


class UIConfig(BaseModel):
    """The ``ui`` section of ``otel-blame serve``'s configuration: the pages and API on its HTTP port."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = Field(default=True, description="serve /ui/ and /api/ on the HTTP receiver's port")
    jaeger_url_template: str | None = Field(
        default=None, description="e.g. http://jaeger:16686/trace/{trace_id}"
    )
    tempo_url_template: str | None = Field(default=None, description="a Grafana Explore URL with {trace_id}")
    max_upload_bytes: int = Field(default=16 * MiB, gt=0, description="largest file /ui/attribute accepts")
    secure_cookies: bool = Field(default=False, description="mark the sign-in cookies Secure (HTTPS)")
