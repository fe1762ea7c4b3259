"""Redaction's false positives, the worst ones found on the Who&When logs
(bench/redaction_false_positives.py), are not masked; the secrets that look like them still are."""

from __future__ import annotations

import pytest

from otel_blame.redaction import Redactor

ORIGIN_TRIAL = (
    "A1L3tx5CzccqjN3lK6st/fXMwhf9EeokCPf8XCt0DVI8JPbg37BWq0zKvlqgkdm8YEUbthoGkC/xdR1+iIz4txAAAAB"
    "xeyJvcmlnaW4iOiJodHRwczovL3d3dy5iaW5nLmNvbTo0NDMiLCJmZWF0dXJlIjoiTXNVc2VyQWdlbnRMYXVuY2hOYXZUeXBlIn0="
)


@pytest.mark.parametrize(
    "text",
    [
        # a web page's public metadata (every Bing page carries it): a long camel-case name, not a secret's
        f'"referrer": "origin-when-cross-origin", "SystemEntropyOriginTrialToken": "{ORIGIN_TRIAL}",',
        # placeholders and environment variables' names in example code
        "headers = {'X-TripAdvisor-API-Key': 'YOUR_API_KEY'}",
        "API_KEY = 'YOUR_API_KEY'",
        "token = 'YOUR_ACCESS_TOKEN'  # Replace this with your token",
        "api_key = '<your-api-key>'",
        "password: ********",
        "OPENAI_API_KEY=OPENAI_API_KEY",
        "token = '${GITHUB_TOKEN}'",
        # code passing a variable on
        "await self.send(message, cancellation_token=ctx.cancellation_token)",
        "client = Client(api_key=api_key, secret=self.secret)",
        # prose
        "1. Obtain a Valid Wikimedia API Token: Follow the instructions provided",
    ],
)
def test_what_is_not_a_secret_is_left_alone(text: str) -> None:
    assert Redactor()(text) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('{"githubToken": "a1b2c3d4e5f6a7b8"}', "a1b2c3d4e5f6a7b8"),
        ("X-Api-Key: 9f8e7d6c5b4a3210", "9f8e7d6c5b4a3210"),
        ('"clientSecret": "Zx9-QwErTy-77"', "Zx9-QwErTy-77"),
        ("DB_PASSWORD=Hunter22", "Hunter22"),
        ("Password: hunter22", "hunter22"),
        ("password: Summer2024!", "Summer2024!"),
        ("token = 'tok_9aB3xY7q'", "tok_9aB3xY7q"),
        ('"SessionToken": "AbCdEf012345"', "AbCdEf012345"),
        ('"DbPassword": "s3cr3t-pw"', "s3cr3t-pw"),
        ("password=hunter22secret", "hunter22secret"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ],
)
def test_secrets_written_like_them_are_still_masked(text: str, secret: str) -> None:
    assert secret not in Redactor()(text)
