"""moto in server mode, one request at a time.

`moto_server` runs a threaded werkzeug server, and moto's DynamoDB does not make a conditional
write atomic across its threads: two concurrent UpdateItem calls with the same condition can both
pass (seen here: two winners of one claim). Real DynamoDB evaluates the condition and applies the
write atomically, and our race tests assert exactly that. This launcher is moto's own server
(`moto.server`'s app and request handler) with every request serialised behind a lock, so the
local stack keeps DynamoDB's per-item atomicity. Connections stay threaded (keep-alive works);
only the handling of a request is serialised.

    python moto_serialized.py -H 127.0.0.1 -p 5000
"""

import argparse
import os
import signal
import sys
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def serialised(app):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        with lock:
            # Materialise the body inside the lock: the state change and the answer are one step.
            return list(app(environ, start_response))

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        serialised(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
