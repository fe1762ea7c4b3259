"""Content redaction: secrets and e-mail addresses are masked before message text leaves the process.

Shared by the instrumentation (on every captured message) and the processor (on content it
forwards). Built-in patterns cover common API keys, bearer tokens and e-mail addresses; an
optional user callable runs after them. A failing user callable never lets unredacted text
through: the whole text is replaced by :data:`REDACTION_FAILED`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

REDACTION_FAILED = "[content withheld: redaction hook failed]"


@dataclass(frozen=True)
class RedactionPattern:
    """One thing to mask: ``regex`` matches are replaced by ``[REDACTED:{label}]``.

    When the regex has a group named ``secret``, only that group is replaced (so the
    surrounding ``Bearer`` or ``api_key=`` stays readable).
    """

    label: str
    regex: re.Pattern[str]
    # Cheap pre-checks: the regex runs only if one of ``triggers`` occurs in the text (in the
    # lower-cased text when ``ignore_case``; triggers are then lower case) and, if set, one of
    # ``also`` does too. Empty: always run. Plain substring tests are much cheaper than regexes.
    triggers: tuple[str, ...] = ()
    ignore_case: bool = False
    also: tuple[str, ...] = ()

    def may_match(self, text: str, lowered: str) -> bool:
        haystack = lowered if self.ignore_case else text
        if self.triggers:
            for trigger in self.triggers:
                if trigger in haystack:
                    break
            else:
                return False
        if self.also:
            for needle in self.also:
                if needle in text:
                    return True
            return False
        return True

    def apply(self, text: str) -> tuple[str, int]:
        marker = f"[REDACTED:{self.label}]"
        if "secret" not in self.regex.groupindex:
            return self.regex.subn(marker, text)

        def replace(match: re.Match[str]) -> str:
            start, end = match.span("secret")
            whole_start = match.start()
            whole = match.group(0)
            return whole[: start - whole_start] + marker + whole[end - whole_start :]

        return self.regex.subn(replace, text)


BUILTIN_PATTERNS: tuple[RedactionPattern, ...] = (
    RedactionPattern(
        "bearer_token",
        re.compile(r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)"),
        triggers=("bearer",),
        ignore_case=True,
    ),
    RedactionPattern(
        "api_key",
        re.compile(
            r"\b(?:"
            r"sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic, Stripe-like
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
            r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
            r"|github_pat_[A-Za-z0-9_]{30,}"
            r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
            r"|AIza[0-9A-Za-z_\-]{35}"  # Google API keys
            r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
            r")"
        ),
        triggers=(
            "sk-",
            "AKIA",
            "ASIA",
            "ghp_",
            "gho_",
            "ghu_",
            "ghs_",
            "ghr_",
            "github_pat_",
            "xox",
            "AIza",
            "glpat-",
        ),
    ),
    RedactionPattern(
        "api_key",
        re.compile(
            r"(?i)\b(?:api[_-]?key|access[_-]?token|secret[_-]?key|client[_-]?secret|password|passwd)"
            r"[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;]{6,})"
        ),
        triggers=("key", "token", "secret", "passw"),
        ignore_case=True,
        also=(":", "="),
    ),
    RedactionPattern(
        "email",
        re.compile(
            r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b"
        ),
        triggers=("@",),
    ),
)


@dataclass(frozen=True)
class Redacted:
    """The outcome of one redaction: the safe text and how many spans of it were masked."""

    text: str
    replacements: int
    hook_failed: bool = False

    @property
    def changed(self) -> bool:
        return self.replacements > 0 or self.hook_failed


class Redactor:
    """Masks secrets in text; ``hook`` (str -> str) runs after the built-in patterns.

    ``builtin=False`` turns the built-in patterns off (the hook still runs);
    ``extra_patterns`` adds ``(label, regex)`` pairs of your own.
    """

    def __init__(
        self,
        hook: Callable[[str], str] | None = None,
        *,
        builtin: bool = True,
        extra_patterns: Iterable[tuple[str, str | re.Pattern[str]]] = (),
    ) -> None:
        patterns = list(BUILTIN_PATTERNS) if builtin else []
        for label, regex in extra_patterns:
            patterns.append(RedactionPattern(label, re.compile(regex) if isinstance(regex, str) else regex))
        self._patterns = tuple(patterns)
        self._hook = hook
        self._lock = threading.Lock()
        self._hook_failures = 0

    @property
    def hook_failures(self) -> int:
        """How often the user hook raised or returned something other than a string."""
        return self._hook_failures

    def redact(self, text: str) -> Redacted:
        """Return ``text`` with every match masked; never raises for a failing user hook."""
        total = 0
        lowered = text.lower()
        for pattern in self._patterns:
            if pattern.may_match(text, lowered):
                text, count = pattern.apply(text)
                if count:
                    total += count
                    lowered = text.lower()
        if self._hook is None:
            return Redacted(text, total)
        try:
            hooked = self._hook(text)
            if not isinstance(hooked, str):
                raise TypeError(f"redaction hook returned {type(hooked).__name__}, not str")
        except Exception:
            with self._lock:
                self._hook_failures += 1
                first = self._hook_failures == 1
            if first:
                logger.exception("otel-blame: the redaction hook failed; content is withheld")
            return Redacted(REDACTION_FAILED, total, hook_failed=True)
        if hooked != text:
            total += 1
        return Redacted(hooked, total)

    def __call__(self, text: str) -> str:
        return self.redact(text).text


DEFAULT_REDACTOR = Redactor()
