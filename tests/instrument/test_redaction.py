from otel_blame.redaction import REDACTION_FAILED, Redactor


def test_builtin_patterns_mask_keys_tokens_and_emails():
    text = (
        "key sk-proj-abcdefghijklmnopqrstuvwx, aws AKIAABCDEFGHIJKLMNOP, gh ghp_"
        + "a" * 36
        + " header Authorization: Bearer eyJhbGciOi.payload.sig mail jane.doe@example.org"
        + " api_key=hunter22secret"
    )
    result = Redactor().redact(text)
    assert "sk-proj-abcdef" not in result.text
    assert "AKIAABCDEFGHIJKLMNOP" not in result.text
    assert "ghp_aaaa" not in result.text
    assert "eyJhbGciOi" not in result.text and "Bearer [REDACTED:bearer_token]" in result.text
    assert "jane.doe@example.org" not in result.text and "[REDACTED:email]" in result.text
    assert "hunter22secret" not in result.text and "api_key=[REDACTED:api_key]" in result.text
    assert result.replacements >= 6 and result.changed


def test_plain_text_is_untouched():
    text = "The answer is 42; see section 3.1 (no secrets here). skip-this is fine."
    result = Redactor().redact(text)
    assert result.text == text and not result.changed


def test_user_hook_runs_after_builtins_and_a_failing_hook_withholds_content():
    redactor = Redactor(lambda t: t.replace("Project Zeus", "[codename]"))
    assert redactor("Project Zeus mail a@b.io") == "[codename] mail [REDACTED:email]"

    def broken(text: str) -> str:
        raise RuntimeError("boom")

    failing = Redactor(broken)
    assert failing("secret stuff") == REDACTION_FAILED
    assert failing.redact("again").hook_failed
    assert failing.hook_failures == 2
    assert Redactor(lambda t: None)("x") == REDACTION_FAILED  # type: ignore[arg-type,return-value]


def test_builtins_can_be_switched_off_and_extended():
    redactor = Redactor(builtin=False, extra_patterns=[("ticket", r"TICKET-\d+")])
    assert redactor("a@b.io TICKET-123") == "a@b.io [REDACTED:ticket]"
