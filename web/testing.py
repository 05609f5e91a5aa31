"""``POST /v1/testing/time-skip``: time skipping (``app.integrations.time_skip``), registered only on a
server the test kit (``ledgerflow.testing``) started. Anywhere else the path does not exist: 404
``NOT_FOUND`` whose message says why (``web.errors``), and the server says so at start when
LEDGERFLOW_TEST_TIME_SKIPPING is set (``install``)."""

from __future__ import annotations

import logging
import math

from flask import Blueprint, Flask, request

from app.auth import Scope
from app.db import transaction
from app.errors import InvalidArgument, PermissionDenied
from app.integrations import time_skip
from web.auth import current_principal, requires
from web.http import ok, request_id
from web.strict import read_json_body

PATH = "/v1/testing/time-skip"
bp = Blueprint("testing", __name__)
log = logging.getLogger("ledgerflow.testing")


@bp.post(PATH)
@requires(Scope.WORKFLOWS_CONTROL)
def skip_time():
    if not time_skip.key_matches(request.headers.get(time_skip.HEADER)):
        raise PermissionDenied(f"time skipping needs the test kit's key in {time_skip.HEADER}")
    data = read_json_body()
    seconds = data.get("seconds") if isinstance(data, dict) else None
    if set(data if isinstance(data, dict) else ()) - {"seconds"}:
        raise InvalidArgument("only `seconds` is accepted", field="body")
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not 0 < seconds <= time_skip.MAX_SECONDS
    ):
        raise InvalidArgument(
            f"a number of seconds from 0 (excluded) to {time_skip.MAX_SECONDS}", field="seconds"
        )
    with transaction() as conn:
        skipped = time_skip.skip(conn, current_principal(), float(seconds), request_id=request_id())
    return ok({"skipped": skipped.to_dict()})


def install(app: Flask) -> None:
    """Register the route on a server the kit started; elsewhere, say why not when asked for it."""
    if time_skip.enabled():
        app.register_blueprint(bp)
        log.warning("time skipping is ON (a test server started by ledgerflow.testing): %s", PATH)
        return
    why = time_skip.refusal()
    if why is not None:
        log.warning(why)
