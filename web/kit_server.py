"""The web process of the test kit (``ledgerflow.testing`` runs ``python -m web.kit_server``): the real
WSGI app on 127.0.0.1 and a free port, served by werkzeug's threaded server in this one process (the kit's
direct child, so time skipping's gate finds the kit among its ancestors). Prints ``listening on PORT``
once it accepts connections, and stops on SIGTERM / SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from werkzeug.serving import make_server

from app.observability.logs import setup_logging
from web import create_app


def main() -> int:
    setup_logging()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = make_server("127.0.0.1", 0, create_app(), threaded=True)

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening on {server.server_port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
