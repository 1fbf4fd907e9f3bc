"""What every adapter does the same way: import its SDK, hold a client, call, translate.

An adapter is an ordinary model callable: `adapter(transcript) -> action`. Subclasses own
the wire format (`request` builds the create() arguments, `reply` reads the JSON body);
this class owns the rest: the SDK imported lazily (MissingExtra without it), one client
with the SDK's own retries off (the loop's retries are the only ones), errors translated
for the loop, tools bound by `with_tools`.
"""

from __future__ import annotations

import copy
import importlib
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, ClassVar, Self, TypeVar
from urllib.parse import urlsplit

from runner.core.deltas import DeltaStream, current_stream
from runner.core.interrupts import CallInterrupted, stop_requested
from runner.errors import MissingExtra, ModelFatal, ModelRetryable, RunnerError
from runner.models.failures import redact, translate
from runner.models.pricing import PriceLike, Pricer, as_price
from runner.models.schemas import ToolSpec, tool_specs
from runner.models.streams import Assembler

T = TypeVar("T")

# A model call may take this long in all, unless the adapter says otherwise (total_timeout).
DEFAULT_TOTAL_TIMEOUT = 600.0
# How often a call in flight looks at its run (cancelled, paused) and its clock.
_WATCH_EVERY = 0.2


class Adapter:
    """Common ground of the provider adapters; see OpenAIChat and AnthropicMessages."""

    provider: ClassVar[str]  # the SDK's module, the extra's name, genai-prices' provider id
    official_host: ClassVar[str]  # where the provider's own API is (priced by provider id)

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        client: Any,
        system: str | None,
        price: PriceLike | None,
        request_params: Mapping[str, Any],
        secrets: Iterable[str] = (),
        total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
        limit: str | None = None,
        price_table: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{type(self).__name__} needs a model name, not {model!r}")
        self.model = model
        # The provider limit the calls draw from (`runner limit set`), read by the loop as
        # any model's `limit`: `provider/model` unless named (the loop knows no provider).
        if limit is not None and (not isinstance(limit, str) or not limit):
            raise ValueError(f"{type(self).__name__}'s limit must be the name of a limit")
        self.limit = limit or f"{self.provider}/{model}"
        self.system = system
        params = dict(request_params)
        # stream=True: through the SDK's streaming API, each piece handed to the run's
        # followers (runner.core.deltas); the response and its action are the same.
        self.stream = bool(params.pop("stream", False))
        self.request_params = params
        self.tools: list[ToolSpec] = []
        self._sdk = self._import_sdk()
        self._base_url = base_url
        self._api_key = api_key
        self._secrets = [str(secret) for secret in secrets]
        if total_timeout is not None and not (0 < total_timeout < threading.TIMEOUT_MAX):
            raise ValueError("total_timeout must be a positive number of seconds or None")
        self.total_timeout = total_timeout
        self._given = client
        self._client: Any = None
        self._lock = threading.Lock()
        if not isinstance(price_table, bool):
            raise ValueError(f"price_table must be True or False, not {price_table!r}")
        self._pricer = Pricer(
            as_price(price),
            provider_id=self.provider,
            provider_api_url=None,
            price_table=price_table,
        )

    def with_tools(self, tools: Mapping[str, Callable[..., Any]]) -> Self:
        """This adapter, telling the model about `tools` (Agent calls it with its own)."""
        bound = copy.copy(self)
        bound.tools = tool_specs(tools)
        # Each adapter owns the client it makes: closing one never breaks the other.
        bound._client, bound._lock = None, threading.Lock()
        return bound

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        # Whatever leaves an adapter is said in words with no secret in them: the key the
        # client really uses, the configured secrets, a header's value, anything shaped like
        # a key (runs.error, `runner show`, exports and spans all repeat these words).
        try:
            return self._call(transcript)
        except ModelRetryable as exc:
            raise ModelRetryable(self._redact(str(exc)), retry_after=exc.retry_after) from None
        except ModelFatal as exc:
            raise ModelFatal(self._redact(str(exc))) from None
        except (RunnerError, CallInterrupted):
            raise
        except Exception as exc:  # a bug or a surprise of the SDK's: retried like any error
            raise ModelRetryable(
                f"{self.provider}: {type(exc).__name__}: {self._redact(str(exc))}"
            ) from None

    def _call(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        request = self.request(transcript)
        client = self._connect()
        try:
            if self.stream:
                # Taken here: the thread that reads the stream has no context of the run's.
                sent: dict[str, Any] | bytes = self._send_streamed(
                    client, request, current_stream()
                )
            else:
                sent = self._send(client, request)
        except Exception as exc:
            failure = self._translate(exc, client)
            if failure is None:
                raise
            raise failure from None  # the SDK's traceback holds the request, headers included
        if isinstance(sent, dict):  # streamed: already assembled into the body
            return self.reply(sent)
        try:
            body = json.loads(sent)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelRetryable(f"{self.provider} API returned malformed JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ModelRetryable(f"{self.provider} API returned JSON that is not an object")
        return self.reply(body)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"

    def close(self) -> None:
        """Close the client this adapter made (a client passed in stays the caller's)."""
        with self._lock:
            if self._client is not None and self._given is None:
                self._client.close()
            self._client = None

    # -- for subclasses ---------------------------------------------------------------------

    def request(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of the SDK's create() call for `transcript`."""
        raise NotImplementedError

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The action a response body means."""
        raise NotImplementedError

    def _make_client(self, sdk: Any) -> Any:
        raise NotImplementedError

    def _stream(self, client: Any, request: dict[str, Any]) -> Any:
        """The SDK's streamed-response context manager of one create() call."""
        raise NotImplementedError

    def _events(self, client: Any, request: dict[str, Any]) -> Any:
        """The SDK's stream of events of one create(stream=True) call (a context manager)."""
        raise NotImplementedError

    def _assembler(self) -> Assembler:
        """What makes the stream's events one response body again."""
        raise NotImplementedError

    def _send(self, client: Any, request: dict[str, Any]) -> bytes:
        """The response body, as the provider sent it."""

        def fetch(request: dict[str, Any], abandoned: threading.Event) -> bytes | None:
            parts: list[bytes] = []
            with self._stream(client, request) as response:
                for chunk in response.iter_bytes():
                    if abandoned.is_set():
                        return None
                    parts.append(chunk)
            return b"".join(parts)

        return self._watched(request, fetch)

    def _send_streamed(
        self, client: Any, request: dict[str, Any], deltas: DeltaStream | None
    ) -> dict[str, Any]:
        """The response streamed through the SDK's streaming API, each piece handed to
        `deltas` as it comes, assembled into the body the same call answers unstreamed."""
        assembler = self._assembler()

        def fetch(request: dict[str, Any], abandoned: threading.Event) -> dict[str, Any] | None:
            with self._events(client, request) as events:
                for event in events:
                    if abandoned.is_set():
                        return None
                    for piece in assembler.add(event.to_dict()):
                        if deltas is not None:
                            deltas.emit(
                                piece.text, part=piece.part, call=piece.call, tool=piece.tool
                            )
            return assembler.body()

        return self._watched(request, fetch)

    def _watched(
        self, request: dict[str, Any], read: Callable[[dict[str, Any], threading.Event], T | None]
    ) -> T:
        """What `read` gives, read on a thread of its own while this one watches the clock
        and the run: a call past `total_timeout` (a server that sends a byte now and then
        never trips a read timeout) or whose run is cancelled or paused is given up at once
        (`read` is told by the event it is given, and stops at its next piece, or at the
        SDK's read timeout)."""
        if self.total_timeout is not None and "timeout" not in request:
            request = {**request, "timeout": self.total_timeout}  # each read, at most that
        body: Future[T] = Future()
        abandoned = threading.Event()

        def fetch() -> None:
            try:
                value = read(request, abandoned)
                if value is not None:
                    body.set_result(value)
            except BaseException as exc:  # handed to the waiting caller
                body.set_exception(exc)

        threading.Thread(target=fetch, name="runner-model-call", daemon=True).start()
        started = time.monotonic()
        while True:
            try:
                return body.result(timeout=_WATCH_EVERY)
            except FutureTimeout:
                pass
            why = stop_requested()
            if why is not None:
                abandoned.set()
                raise CallInterrupted(why)
            if self.total_timeout is not None and (
                time.monotonic() - started >= self.total_timeout
            ):
                abandoned.set()
                raise ModelRetryable(
                    f"{self.provider} API call took longer than its total_timeout, "
                    f"{self.total_timeout:g} s: given up"
                )

    # -- the client -------------------------------------------------------------------------

    def _import_sdk(self) -> Any:
        try:
            return importlib.import_module(self.provider)
        except ImportError:
            raise MissingExtra(
                f"{type(self).__name__} needs the {self.provider} package: "
                f"pip install 'durable-runner[{self.provider}]'"
            ) from None

    def _connect(self) -> Any:
        # Made on first use, not in __init__: importing an agent module needs no key, and a
        # missing key is a model_error of the run that needs it.
        with self._lock:
            if self._client is None:
                try:
                    if self._given is not None:
                        self._client = self._given.with_options(max_retries=0)
                    else:
                        self._client = self._make_client(self._sdk)
                        # Closed with the adapter, so no pooled socket outlives it.
                        weakref.finalize(self, self._client.close)
                except Exception as exc:
                    failure = self._translate(exc, None)
                    if failure is None:
                        raise
                    raise failure from None
                # Another server by the same API may have prices of its own in the table,
                # known by its URL (a gateway); else the model's are the provider's.
                url = str(getattr(self._client, "base_url", "") or "")
                official = urlsplit(url).hostname in (None, self.official_host)
                self._pricer.provider_api_url = None if official else url
            return self._client

    def _translate(self, exc: Exception, client: Any) -> Exception | None:
        return translate(exc, self._sdk, self._sdk_error(), self.provider, self._known_secrets())

    def _redact(self, text: str) -> str:
        return redact(text, self._known_secrets())

    def _known_secrets(self) -> list[str]:
        """The key as given and as the client resolved it (from the environment, say), the
        configured secrets, and the values of headers that authenticate."""
        found = [self._api_key, *self._secrets]
        for client in (self._client, self._given):
            if client is None:
                continue
            found.append(getattr(client, "api_key", None))
            found.extend(_header_secrets(getattr(client, "default_headers", None)))
        found.extend(_header_secrets(self.request_params.get("extra_headers")))
        return [secret for secret in found if isinstance(secret, str) and secret]

    def _sdk_error(self) -> type[Exception]:
        raise NotImplementedError


_SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "signature")


def _header_secrets(headers: object) -> list[str]:
    """Values of headers whose names say they authenticate, and their last word (a
    `Bearer X` header's X)."""
    if not isinstance(headers, Mapping):
        return []
    found: list[str] = []
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            continue
        if any(word in name.lower() for word in _SECRET_HEADER_WORDS):
            found.append(value)
            found.append(value.rsplit(" ", 1)[-1])
    return found
