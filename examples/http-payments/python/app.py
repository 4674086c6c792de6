"""A payments API in Python (WSGI, on the standard library's wsgiref) whose
POST /payments is guarded by idem's Idempotency-Key middleware
(idem.web.WSGIMiddleware): a client that retries a payment after a timeout,
with the same key, gets the first response back and is charged once.
docs/idempotent-http.md walks through it; the Go and Node examples beside
it serve the same API.

    PYTHONPATH=clients/python/src python3 examples/http-payments/python/app.py \\
        --listen 127.0.0.1:8082 --idem http://127.0.0.1:7072

Callers authenticate with an API key (Authorization: Bearer sk_test_alice
or sk_test_bob); the account it names is the middleware's caller. GET
/charges says how many charges this process made; GET /healthz answers ok.
"""

import argparse
import json
import os
import signal
import socketserver
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import idem
from idem.web import WSGIMiddleware

ACCOUNTS = {"sk_test_alice": "alice", "sk_test_bob": "bob"}


class Payments:
    """Charges cards: here, a counter stands for the card network."""

    def __init__(self):
        self.charges = 0
        self.lock = threading.Lock()

    def create(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        try:
            body = json.loads(environ["wsgi.input"].read(length) or b"{}")
        except ValueError:
            body = {}
        amount, currency = body.get("amount"), body.get("currency")
        if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0 or not isinstance(currency, str) \
                or not currency:
            return json_response(start_response, "400 Bad Request", {"error": "send a positive amount and a currency"})
        with self.lock:
            self.charges += 1  # the side effect that must happen once per payment
            pid = f"pay_{self.charges}"
        return json_response(start_response, "201 Created", {"amount": amount, "currency": currency, "id": pid},
                             [("Location", f"/payments/{pid}")])


def json_response(start_response, status, value, headers=()):
    body = (json.dumps(value, separators=(",", ":")) + "\n").encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers])
    return [body]


def make_app(client):
    payments = Payments()
    guarded = WSGIMiddleware(payments.create, client, namespace="payments-api",
                             caller=lambda environ: environ["payments.account"], require_key=True)

    def app(environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method == "GET" and path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if method == "GET" and path == "/charges":
            return json_response(start_response, "200 OK", {"charges": payments.charges})
        if method == "POST" and path == "/payments":
            auth = environ.get("HTTP_AUTHORIZATION", "")
            account = ACCOUNTS.get(auth[len("Bearer "):] if auth.startswith("Bearer ") else auth)
            if account is None:
                return json_response(start_response, "401 Unauthorized", {"error": "unknown API key"})
            environ["payments.account"] = account  # authenticated, in front of the middleware
            return guarded(environ, start_response)
        return json_response(start_response, "404 Not Found", {"error": "not found"})

    return app


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:8080", help="the address to serve the API on")
    p.add_argument("--idem", default=os.environ.get("IDEM_JSON_URL") or idem.DEFAULT_URL,
                   help="idemd's HTTP/JSON listener (IDEM_JSON_URL)")
    args = p.parse_args()
    host, _, port = args.listen.rpartition(":")
    with idem.Client(args.idem, token=os.environ.get("IDEM_TOKEN", "")) as client:
        server = make_server(host, int(port), make_app(client), server_class=Server, handler_class=QuietHandler)
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
