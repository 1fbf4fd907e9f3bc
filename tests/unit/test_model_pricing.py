"""Costs of model calls: given rates, genai-prices' table, or honestly unknown."""

from __future__ import annotations

import email.utils
import json
import logging
import sys
import time
from typing import Any
from urllib.parse import quote

import pytest

from runner.models import Price
from runner.models.failures import redact, retry_after
from runner.models.pricing import Pricer, Tokens, as_price


def test_a_price_charges_cache_reads_and_writes_at_their_own_rates() -> None:
    price = Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    tokens = Tokens(input=10_000, output=1_000, cached=4_000, cache_write=2_000)
    assert price.cost(tokens) == pytest.approx(
        (4_000 * 3.0 + 4_000 * 0.3 + 2_000 * 3.75 + 1_000 * 15.0) / 1e6
    )
    # Rates left out are the input rate: never cheaper than what the user said.
    assert Price(3.0, 15.0).cost(tokens) == pytest.approx((10_000 * 3.0 + 1_000 * 15.0) / 1e6)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, None),
        ((0.4, 1.6), Price(0.4, 1.6)),
        ({"input": 1, "output": 2, "cached_input": 0.5}, Price(1, 2, 0.5)),
        (Price(1, 2), Price(1, 2)),
    ],
)
def test_price_forms(given: Any, expected: Price | None) -> None:
    assert as_price(given) == expected


@pytest.mark.parametrize(
    "given",
    [(1, 2, 3), {"inputs": 1, "output": 2}, "0.4/1.6", (-1, 2), (float("nan"), 1), (True, 1)],
)
def test_bad_prices_are_refused(given: Any) -> None:
    with pytest.raises(ValueError, match="price"):
        as_price(given)


def test_given_rates_make_a_known_cost() -> None:
    pricer = Pricer(Price(1.0, 2.0), provider_id="openai", provider_api_url=None)
    assert pricer.usage("anything", Tokens(input=1_000_000, output=500_000, cached=10)) == {
        "input_tokens": 1_000_000,
        "output_tokens": 500_000,
        "cached_tokens": 10,
        "cost": pytest.approx(2.0),
        "cost_known": True,
    }


def test_without_rates_the_genai_prices_table_is_used() -> None:
    pricer = Pricer(None, provider_id="openai", provider_api_url=None)
    usage = pricer.usage("gpt-4.1-mini-2025-04-14", Tokens(input=1000, output=100, cached=200))
    # gpt-4.1-mini in the table: 0.4 input, 0.1 cached input, 1.6 output per million.
    assert usage["cost"] == pytest.approx((800 * 0.4 + 200 * 0.1 + 100 * 1.6) / 1e6)
    assert usage["cost_known"] is True
    claude = Pricer(None, provider_id="anthropic", provider_api_url=None)
    assert claude.usage("claude-haiku-4-5", Tokens(input=1000, output=100))["cost"] > 0


def test_a_model_the_table_does_not_know_costs_zero_marked_unknown() -> None:
    pricer = Pricer(None, provider_id="openai", provider_api_url="http://127.0.0.1:11434/v1")
    usage = pricer.usage("llama3.2", Tokens(input=10, output=5))
    assert usage == {"input_tokens": 10, "output_tokens": 5, "cost": 0.0, "cost_known": False}


def test_a_model_is_priced_by_name_behind_any_host(caplog: pytest.LogCaptureFixture) -> None:
    """A proxy's URL decides nothing: the model's list price holds, unless price_table=False
    says the table does not apply there; the warning says which it was."""
    proxy = "http://127.0.0.1:4000/v1"
    behind = Pricer(None, provider_id="openai", provider_api_url=proxy)
    usage = behind.usage("gpt-4.1-mini", Tokens(input=1000, output=100))
    assert usage["cost_known"] is True
    assert usage["cost"] == pytest.approx((1000 * 0.4 + 100 * 1.6) / 1e6)
    with caplog.at_level(logging.WARNING, logger="runner.models"):
        off = Pricer(None, provider_id="openai", provider_api_url=proxy, price_table=False)
        assert off.usage("gpt-4.1-mini", Tokens(1, 1))["cost_known"] is False
        assert behind.usage("llama3.2", Tokens(1, 1))["cost_known"] is False
    first, second = (r.getMessage() for r in caplog.records)
    assert "gpt-4.1-mini" in first and "price_table=False" in first
    assert "llama3.2" in second and "no openai model of that name" in second


def test_without_genai_prices_the_cost_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)
    pricer = Pricer(None, provider_id="openai", provider_api_url=None)
    assert pricer.usage("gpt-4.1-mini", Tokens(1, 1))["cost_known"] is False


# -- Retry-After and redaction ------------------------------------------------------------


def test_retry_after_forms() -> None:
    assert retry_after({}) is None
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after": "0.5"}) == 0.5
    assert retry_after({"retry-after": "-3"}) == 0.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"retry-after": "soon"}) is None
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    wait = retry_after({"retry-after": later})
    assert wait is not None and 100 < wait <= 120


def test_redaction_takes_out_keys_and_credentials() -> None:
    text = "key abcd1234 failed; also sk-ant-api03-XYZxyz_123 and Authorization: Bearer tok.en/9"
    assert redact(text, ["abcd1234", None, ""]) == (
        "key [redacted] failed; also sk-[redacted] and Authorization: Bearer [redacted]"
    )
    assert len(redact("x" * 2000, [])) == 503


def test_redaction_takes_out_every_provider_key_shape() -> None:
    # sk- (secret), pk- (publishable) and rk- (restricted) keys, none of them configured.
    text = "sk-live-4f3e2d1c0b, pk-live-9a8b7c6d5e and rk-live-1a2b3c4d5e"
    assert redact(text, []) == "sk-[redacted], pk-[redacted] and rk-[redacted]"


def test_redaction_takes_out_a_secret_as_a_server_may_echo_it() -> None:
    """URL-encoded (its first characters encoded too, so no start of it shows as given),
    JSON-escaped, and cut short: no form leaves a piece of the secret."""
    secret = 'p@ss/w0rd+se"cret-xyz-0987'
    for echoed in (quote(secret, safe=""), json.dumps(secret)[1:-1], secret[:12] + "..."):
        shown = redact(f"refused {echoed} here", [secret])
        assert shown.startswith("refused [redacted]") and shown.endswith(" here"), shown
        for piece in ("w0rd", "%40ss", "cret-xyz", secret[:8]):
            assert piece not in shown, (echoed, shown)
