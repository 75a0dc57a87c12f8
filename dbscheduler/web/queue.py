"""Keyed delayed batches over HTTP: the exfe-style queue service and the batches API.

- ``POST /v3/queue/{merge_key}/{method}/{service}?update=always|once&ontime=<unix s>`` with a
  JSON body pushes the body to the built-in HTTP delivery handler: when the key is due, one
  node sends ``{method}`` to the URL ``service`` (URL-safe base64) with the JSON array of the
  key's items. ``DELETE`` on the same path drops the key's pending items.
- ``GET /api/batches`` lists the keys with pending items, ``POST /api/batches/drop`` drops one
  (the dashboard's batches page uses both).

Bad input (not base64, not an http(s) URL, no or bad ``ontime``, an unknown ``update``, a body
that is not JSON) answers 422 and stores nothing; a target host off the allow-list answers 403.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ..http_delivery import HTTP_HANDLER, AllowList, http_target
from .api import ERROR_RESPONSES, ApiError, client_of

__all__ = ["api_router", "queue_router"]

QUEUE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    403: {"model": ApiError,
          "description": "the target host is not on the allow-list; read-only; cross-site"},
    422: {"model": ApiError, "description": "not base64, not an http(s) URL, no or bad "
                                            "ontime, unknown update or method, body not JSON"},
}

queue_router = APIRouter(tags=["queue"], responses=QUEUE_ERRORS)
api_router = APIRouter(prefix="/api", tags=["batches"], responses=ERROR_RESPONSES)


class Pushed(BaseModel):
    """Where the item went: its batch key (merge key, method and a digest of the URL)."""

    handler: str = Field(examples=[HTTP_HANDLER])
    key: str = Field(description="the batch key the item waits under")
    merge_key: str
    method: str
    url: str


class Dropped(BaseModel):
    """How many pending items were removed."""

    dropped: int
    key: str


class Batch(BaseModel):
    """A key with items waiting, as ``dbscheduler batches --json`` prints it."""

    handler: str
    key: str
    name: str = Field(description="the key's row in the tasks table")
    items: int
    due_at: datetime | None = Field(description="next delivery; null while it is delivered")
    running: bool
    locked_by: str | None
    attempt: int = Field(description="failed deliveries of the current items")
    last_status: str | None
    last_error: str | None
    paused: bool
    first_pushed_at: datetime
    last_pushed_at: datetime
    data: Any = Field(default=None, description="the HTTP handler's target, or null")


class BatchList(BaseModel):
    """The pending keys, soonest due first, and the database clock."""

    batches: list[Batch]
    db_now: datetime


class DropBody(BaseModel):
    """The key to drop and its batch handler."""

    model_config = ConfigDict(extra="forbid")
    handler: str = Field(min_length=1)
    key: str = Field(min_length=1)


def allow_list(request: Request) -> AllowList:
    allow: AllowList = request.app.state.dashboard.allow
    return allow


MergeKey = Annotated[str, Path(description="items pushed under one key (and target) are "
                                           "delivered together; a key starting with '-' "
                                           "is never merged")]
Method = Annotated[str, Path(description="the HTTP method of the delivery: POST, PUT, PATCH "
                                         "or DELETE")]
Service = Annotated[str, Path(description="the target URL in URL-safe base64 (padding "
                                          "optional)")]
ANY_JSON = {"required": True, "content": {"application/json": {"schema": {}}}}


@queue_router.post(
    "/v3/queue/{merge_key}/{method}/{service}", response_model=Pushed,
    summary="Push an item", openapi_extra={"requestBody": ANY_JSON},
)
async def push(
    request: Request,
    merge_key: MergeKey,
    method: Method,
    service: Service,
    ontime: Annotated[float, Query(description="when the key should be delivered, Unix s")],
    update: Annotated[Literal["always", "once"], Query(
        description="always: the key is due at this ontime; once: only if it has no pending "
                    "items (after a failed delivery, the next push sets the time either way)"
    )] = "always",
) -> JSONResponse:
    """Queue the JSON body; when the key is due, one node sends the key's items as a JSON
    array to the target (2xx: delivered; anything else: retried with backoff)."""
    raw = await request.body()
    try:
        item = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the body is not JSON ({type(exc).__name__}: {exc}); send the item "
                         "as a JSON document") from None
    target = http_target(merge_key, method, service, allow_list(request))
    client = client_of(request)
    await run_in_threadpool(client.push, target.key, item, handler=HTTP_HANDLER, ontime=ontime,
                            update=update, data=target.data())
    return JSONResponse({"handler": HTTP_HANDLER, "key": target.key, "merge_key": merge_key,
                         "method": target.method, "url": target.url})


@queue_router.delete("/v3/queue/{merge_key}/{method}/{service}", response_model=Dropped,
                     summary="Drop a key")
def drop(request: Request, merge_key: MergeKey, method: Method, service: Service
         ) -> JSONResponse:
    """Remove the key's pending items (a delivery already under way ends as usual)."""
    # Whatever the allow-list says now: dropping calls nobody.
    target = http_target(merge_key, method, service, None)
    dropped = client_of(request).drop(target.key, handler=HTTP_HANDLER)
    return JSONResponse({"dropped": dropped, "key": target.key})


@api_router.get("/batches", response_model=BatchList, summary="Pending batches")
def list_batches(
    request: Request,
    handler: Annotated[str | None, Query(description="only this batch handler's keys")] = None,
) -> JSONResponse:
    """Every key with pending items, soonest due first, with its item count and state."""
    client = client_of(request)
    return JSONResponse({"batches": [b.to_dict() for b in client.batches(handler)],
                         "db_now": client.db_now().isoformat()})


@api_router.post("/batches/drop", response_model=Dropped, summary="Drop a key")
def drop_batch(request: Request, body: DropBody) -> JSONResponse:
    """Remove the pending items of ``key`` (every pending push of a ``-`` key)."""
    dropped = client_of(request).drop(body.key, handler=body.handler)
    return JSONResponse({"dropped": dropped, "key": body.key})

