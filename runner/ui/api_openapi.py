"""The HTTP API described as OpenAPI 3.1, served at `/api/openapi.json`
(tests/ui/test_api.py holds it to the routes the app serves)."""

from __future__ import annotations

from typing import Any

from runner.core.budgets import Budgets
from runner.core.status import STATES
from runner.core.stop_reasons import StopReason

_ERROR = {"$ref": "#/components/schemas/Error"}
_RUN = {"$ref": "#/components/schemas/Run"}
_SENT = {"$ref": "#/components/schemas/Sent"}
_RUN_ID = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "description": "The run's whole id (the CLI takes a prefix; the API does not).",
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$"},
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    said = {
        400: "Bad input: malformed JSON, a wrong type, an unknown field or value.",
        401: "No token: send `Authorization: Bearer TOKEN` (writes need the header).",
        404: "No such run.",
        409: "Refused: the idempotency key names another request, the run does not wait "
        "for this answer, or it has finished (a message without `revive`).",
        413: "The body is larger than 1 MiB.",
        415: "The body is not JSON.",
    }
    return {str(status): _json(_ERROR, said[status]) for status in statuses}


def _answer(field: str, required: bool, summary: str) -> dict[str, Any]:
    properties = {
        field: {"type": "string"},
        "call": {
            "type": "string",
            "description": "The waiting call's key (needed when a step waits for several).",
        },
        "by": {"type": "string", "description": "Who answers (default: the server's OS user)."},
    }
    return {
        "summary": summary,
        "parameters": [_RUN_ID],
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": properties,
                        "additionalProperties": False,
                        "required": [field] if required else [],
                    }
                }
            },
        },
        "responses": {
            "200": _json({"$ref": "#/components/schemas/Answered"}, "The answer as recorded."),
            **_errors(400, 401, 404, 409, 413, 415),
        },
    }


def openapi() -> dict[str, Any]:
    """The OpenAPI document of `/api/`."""
    budgets = {
        name: {"type": ["number", "integer", "boolean", "null"]} for name in Budgets().as_dict()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runner",
            "version": "1",
            "description": "Runs of a runner database: read, submit, cancel, answer, follow. "
            "Every request carries the server's token (`Authorization: Bearer TOKEN`) when it "
            "has one; every POST needs that header (a cookie is not enough), or, on a server "
            "with no token (loopback only), `Content-Type: application/json`.",
        },
        "components": {
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "properties": {"error": {"type": "string"}},
                    "required": ["error"],
                },
                "Run": {
                    "type": "object",
                    "description": "A run as `runner show --json` gives it.",
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"type": "string"},
                        "state": {"type": "string", "enum": list(STATES)},
                        "stop_reason": {"type": ["string", "null"]},
                        "output": {},
                        "steps": {"type": "integer"},
                        "tokens": {"type": "integer"},
                        "cost": {"type": "number"},
                        "waiting": {"type": ["object", "null"]},
                    },
                    "required": ["id", "status", "state"],
                },
                "Answered": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "call": {"type": "string"},
                        "answer": {"type": "string"},
                        "by": {"type": ["string", "null"]},
                        "at": {"type": "string", "format": "date-time"},
                        "text": {"type": ["string", "null"]},
                        "still_waiting": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "Sent": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "key": {"type": "string"},
                        "number": {"type": "integer"},
                        "sent_at": {"type": "string", "format": "date-time"},
                        "status": {"type": "string", "enum": list(STATES)},
                        "duplicate": {"type": "boolean"},
                        "delivered": {"type": "boolean"},
                        "revived": {"type": "boolean"},
                    },
                },
                "Submit": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["agent", "task"],
                    "properties": {
                        "agent": {
                            "type": "string",
                            "description": "`module:attr` or "
                            "`path.py:attr`, which the server imports as `runner "
                            "submit` does.",
                        },
                        "task": {"type": "string"},
                        "budgets": {
                            "type": "object",
                            "properties": budgets,
                            "additionalProperties": False,
                        },
                        "queue": {"type": "string"},
                        "priority": {"type": "integer"},
                        "delay": {"type": "number", "minimum": 0},
                    },
                },
            },
        },
        "security": [{"token": []}, {}],
        "paths": {
            "/api/runs": {
                "get": {
                    "summary": "Runs, newest first.",
                    "parameters": [
                        {"name": "state", "in": "query", "schema": {"enum": list(STATES)}},
                        {
                            "name": "stop_reason",
                            "in": "query",
                            "schema": {"enum": [r.value for r in StopReason]},
                        },
                        {"name": "release", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": 500,
                                "default": 50,
                            },
                        },
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {"runs": {"type": "array", "items": _RUN}},
                            },
                            "The runs.",
                        ),
                        **_errors(400, 401),
                    },
                },
                "post": {
                    "summary": "Submit a run to the queue (a worker runs it).",
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "schema": {"type": "string", "maxLength": 200},
                            "description": "The same key returns the same run (200); another "
                            "request under it is refused (409). The run's id is the key when it "
                            "is a valid run id, else `k` and 31 hex digits of its SHA-256.",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Submit"}}
                        },
                    },
                    "responses": {
                        "201": _json(_RUN, "Submitted: the new run (Location: its URL)."),
                        "200": _json(_RUN, "The run this key already named, same request."),
                        **_errors(400, 401, 409, 413, 415),
                    },
                },
            },
            "/api/runs/{run_id}": {
                "get": {
                    "summary": "One run.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "transcript",
                            "in": "query",
                            "schema": {"type": "boolean"},
                            "description": "Include the transcript.",
                        },
                    ],
                    "responses": {"200": _json(_RUN, "The run."), **_errors(401, 404)},
                }
            },
            "/api/runs/{run_id}/events": {
                "get": {
                    "summary": "The run's journal as Server-Sent Events, followed to its end.",
                    "description": "Each entry is an `entry` event whose `id:` is its position "
                    "(0, 1, ...); then one `end` event with the run, and the stream closes. "
                    "Resume with `Last-Event-ID` (or `?after=`): only the entries after it. "
                    "`?deltas=true`: the model call in flight's pieces too (`delta` events). "
                    "`?tree=true`: the entries of every run below it too, each naming its "
                    "`run_id`, with no `id:`; the stream ends when every run of the tree has.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "after",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": -1},
                        },
                        {"name": "deltas", "in": "query", "schema": {"type": "boolean"}},
                        {"name": "tree", "in": "query", "schema": {"type": "boolean"}},
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "schema": {"type": "integer", "minimum": -1},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The events.",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **_errors(400, 401, 404),
                    },
                }
            },
            "/api/runs/{run_id}/cancel": {
                "post": {
                    "summary": "Ask the run to stop before its next step.",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(_RUN, "The run."),
                        **_errors(400, 401, 404, 413, 415),
                    },
                }
            },
            "/api/runs/{run_id}/messages": {
                "post": {
                    "summary": "Send the run a message: the model reads it before its next step.",
                    "description": "The `Idempotency-Key` header is the message's key (else a "
                    "new one, in the answer): the same key again is the same message (200). "
                    "A finished run refuses a message (409) unless `revive` is true.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "schema": {"type": "string", "maxLength": 80},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "message": {
                                            "type": ["string", "object"],
                                            "description": "Text, or an object for an agent "
                                            "that accepts a typed message.",
                                        },
                                        "revive": {"type": "boolean"},
                                        "budgets": {
                                            "type": "object",
                                            "properties": budgets,
                                            "additionalProperties": False,
                                        },
                                    },
                                    "additionalProperties": False,
                                    "required": ["message"],
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": _json(_SENT, "Sent: the message in the run's inbox."),
                        "200": _json(_SENT, "The message this key already named."),
                        **_errors(400, 401, 404, 409, 413, 415),
                    },
                }
            },
            "/api/runs/{run_id}/scores": {
                "get": {
                    "summary": "The run's scores by name: kept, failed, and its scorers' not "
                    "yet run.",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"scores": {"type": "array"}}},
                            "The scores.",
                        ),
                        **_errors(400, 401, 404),
                    },
                },
                "post": {
                    "summary": "Keep a score of the run (one of the same name replaces it).",
                    "parameters": [_RUN_ID],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "name": {"type": "string", "maxLength": 80},
                                        "value": {"type": "number"},
                                        "note": {"type": "string"},
                                    },
                                    "additionalProperties": False,
                                    "required": ["name", "value"],
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": _json({"type": "object"}, "The score, kept."),
                        **_errors(400, 401, 404, 413, 415),
                    },
                },
            },
            "/api/runs/{run_id}/approve": {
                "post": _answer("note", False, "Approve the call the run waits for.")
            },
            "/api/runs/{run_id}/deny": {
                "post": _answer("reason", True, "Deny the call the run waits for.")
            },
            "/api/runs/{run_id}/reply": {
                "post": _answer("text", True, "Reply to the run's question.")
            },
            "/api/openapi.json": {
                "get": {
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.1"}},
                }
            },
        },
    }
