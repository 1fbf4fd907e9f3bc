"""Provider errors as the loop understands them: retry later, or stop the run now.

Rate limits (429), overload (529), other 5xx, 408/409, timeouts and connection failures
are `ModelRetryable` (with the provider's Retry-After); authentication, permission and
bad requests are `ModelFatal`. Messages carry the provider's own words, with anything
that looks like a key taken out, and never a header.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from runner.errors import ModelFatal, ModelRetryable

# A Retry-After longer than this is a quota, not a hiccup: waiting it out holding a worker
# slot helps nobody, so the run stops and says how long the provider asked for.
MAX_RETRY_AFTER = 300.0
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MESSAGE_LIMIT = 500
_KEYS = re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_*.-]{6,}")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9_*.~+/=-]+")


def translate(
    exc: Exception, sdk: Any, base: type[Exception], provider: str, secrets: Iterable[str | None]
) -> Exception | None:
    """The runner error for an exception of the SDK (`base` is its root), else None."""
    if not isinstance(exc, base):
        return None
    if _in_stream(exc, sdk):
        # An error event in a stream that began well (the provider overloaded mid-answer):
        # a new call may well go through.
        words = redact(_provider_message(getattr(exc, "body", None)) or str(exc), secrets)
        return ModelRetryable(f"{provider} API error in the stream: {words}")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        words = redact(_provider_message(exc.body) or str(exc.message), secrets)
        message = f"{provider} API error {status}: {words}"
        if status in _RETRYABLE_STATUS or status >= 500:
            wait = retry_after(exc.response.headers)
            if wait is not None and wait > MAX_RETRY_AFTER:
                return ModelFatal(
                    f"{message} (the provider asks to wait {wait:g}s, longer than runner "
                    f"waits: {MAX_RETRY_AFTER:g}s)"
                )
            return ModelRetryable(message, retry_after=wait)
        return ModelFatal(message)
    if isinstance(exc, sdk.APITimeoutError):
        return ModelRetryable(f"{provider} API timed out")
    if isinstance(exc, sdk.APIConnectionError):
        return ModelRetryable(f"{provider} API unreachable: {redact(str(exc.message), secrets)}")
    if isinstance(exc, sdk.APIResponseValidationError):
        return ModelRetryable(f"{provider} API returned a response that does not fit its API")
    # Anything else the SDK raises on purpose (no key configured, a bad option) is the
    # caller's to fix: retrying would fail the same way.
    return ModelFatal(f"{provider}: {redact(str(exc), secrets)}")


def _in_stream(exc: Exception, sdk: Any) -> bool:
    """Whether `exc` is an error event in a streamed response (its HTTP status was 200)."""
    if isinstance(exc, sdk.APIStatusError):
        return bool(exc.status_code < 400)
    return type(exc) is sdk.APIError  # the openai SDK's for an error chunk


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """`text` without the given secrets or anything shaped like an API key, cut short.

    A secret is taken out as it is, URL-encoded and JSON-escaped (how a server may echo
    it), and so is a long enough start of it (a server that echoes a key cut short)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            for form in {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}:
                text = text.replace(form, "[redacted]")
            text = _without_starts_of(text, secret)
    text = _BEARER.sub(r"\1 [redacted]", _KEYS.sub(r"\1-[redacted]", text))
    if len(text) > _MESSAGE_LIMIT:
        text = text[:_MESSAGE_LIMIT] + "..."
    return text


# A start of a secret this long is as good as the secret to whoever guesses the rest.
_SECRET_START = 8


def _without_starts_of(text: str, secret: str) -> str:
    if len(secret) < 2 * _SECRET_START:
        return text
    head = secret[:_SECRET_START]
    start = text.find(head)
    while start != -1:
        end = start + _SECRET_START
        while end - start < len(secret) and end < len(text) and text[end] == secret[end - start]:
            end += 1
        text = text[:start] + "[redacted]" + text[end:]
        start = text.find(head, start + len("[redacted]"))
    return text


def _provider_message(body: object) -> str | None:
    """`error.message` of an error body (the SDKs hand over the body or its `error`)."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            message = inner.get("message")
            return message if isinstance(message, str) and message else None
        if isinstance(inner, str) and inner:
            return inner
    if isinstance(body, str) and body.strip():
        return body.strip()
    return None
