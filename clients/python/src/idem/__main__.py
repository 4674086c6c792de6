"""python -m idem: claim, complete, fail, heartbeat and lookup from a shell,
where Python is installed and the Go ``idem`` CLI is not. These five
commands take the idem CLI's flags that a shell worker uses and exit with
its codes, so a worker like this one runs with either:

    if TOKEN=$(python -m idem claim -n process_payment -k "$KEY" --lease-ttl 30s); then
      charge_card && python -m idem complete -n process_payment -k "$KEY" --lease-token "$TOKEN" --result ok
    fi

The flags: -n, -k; claim's --lease-ttl, --retention, --claimant, --wait,
--fingerprint, --fingerprint-of and --result-out; --lease-token (or
IDEM_LEASE_TOKEN) for complete, fail and heartbeat; complete's --result and
--result-file; fail's --error and --retryable; heartbeat's --lease-ttl;
lookup's --result-out. It has none of the idem CLI's other flags (-o, -q,
--tls-cert, --tls-key, --tls-server-name, ...), and lookup prints the record
as Record.to_json() does, which is not the shape of the idem CLI's
``lookup -o json``.

It talks to idemd's HTTP/JSON listener: --url (IDEM_JSON_URL, default
http://127.0.0.1:7072), --token (IDEM_TOKEN), --tls-ca (IDEM_TLS_CA),
--timeout.
"""

import argparse
import json
import os
import re
import sys
from typing import Any, List, NoReturn, Optional

from ._client import DEFAULT_URL, Client
from ._errors import (AlreadyTerminalError, FingerprintMismatchError, IdemError, InProgressError,
                      InvalidArgumentError, LeaseLostError, NotFoundError, NotUnresolvedError,
                      PermissionDeniedError, RateLimitedError, ResolvedByOperatorError, UnauthenticatedError,
                      UnavailableError, UnresolvedError)
from ._fingerprint import fingerprint
from ._retry import RetryPolicy
from ._types import Outcome

# The idem CLI's exit codes (cmd/idem/exit.go).
EXIT_OK, EXIT_ERROR = 0, 1
EXIT_IN_PROGRESS, EXIT_COMPLETED, EXIT_FAILED = 10, 11, 12
EXIT_NOT_FOUND, EXIT_LEASE_LOST, EXIT_FINGERPRINT_MISMATCH, EXIT_ALREADY_TERMINAL = 13, 14, 15, 16
EXIT_INVALID_ARGUMENT, EXIT_DENIED, EXIT_UNAVAILABLE, EXIT_UNRESOLVED, EXIT_NOT_UNRESOLVED = 17, 18, 19, 20, 21
EXIT_INTERRUPTED = 130

_EXITS = [
    (InProgressError, EXIT_IN_PROGRESS), (UnresolvedError, EXIT_UNRESOLVED), (NotFoundError, EXIT_NOT_FOUND),
    (LeaseLostError, EXIT_LEASE_LOST), (FingerprintMismatchError, EXIT_FINGERPRINT_MISMATCH),
    (AlreadyTerminalError, EXIT_ALREADY_TERMINAL), (ResolvedByOperatorError, EXIT_ALREADY_TERMINAL),
    (InvalidArgumentError, EXIT_INVALID_ARGUMENT),
    (UnauthenticatedError, EXIT_DENIED), (PermissionDeniedError, EXIT_DENIED),
    (NotUnresolvedError, EXIT_NOT_UNRESOLVED), (UnavailableError, EXIT_UNAVAILABLE),
    (RateLimitedError, EXIT_UNAVAILABLE),
]

EPILOG = """exit codes:
    0  ok: for claim, ACQUIRED, and the lease token is on stdout
    1  a bad flag or any other error
   10  claim: another worker holds a live lease; try again later
   11  claim: the job completed earlier (replay); do not do it again
   12  claim: the job failed permanently earlier; its error is on stderr
   13  no such record         14  lease lost: another worker took over; stop
   15  fingerprint mismatch   16  the record already ended, not by this call
                              (also when an operator resolved it)
   17  invalid argument       18  unauthenticated or permission denied
   19  idemd or its database unreachable, or the rate limit hit; retry later
   20  claim: the record is held for resolution; park the message
"""

def exit_code(err: IdemError) -> int:
    """The idem CLI's exit code for err, by its kind (1 for any other)."""
    for cls, code in _EXITS:
        if isinstance(err, cls):
            return code
    return EXIT_ERROR


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """A duration as Go writes it (1m30s, 1.5s, 500ms) or bare seconds."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (30s, 1.5s, 500ms, 2m, or seconds)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def _write(path: Optional[str], data: bytes) -> None:
    if not path:
        return
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    with open(path, "wb") as f:
        f.write(data)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a usage error exits 1, as the idem
    CLI's does (argparse's own is 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _connection_flags(p: argparse.ArgumentParser, defaults: bool) -> None:
    """Adds the flags that say how to reach idemd: with their defaults to
    the top parser, and without (so as not to override one given before the
    command) to each command's, since the idem CLI takes them on either side
    of the command."""
    def default(v: Any) -> Any:
        return v if defaults else argparse.SUPPRESS

    p.add_argument("--url", default=default(os.environ.get("IDEM_JSON_URL") or DEFAULT_URL),
                   help=f"idemd's HTTP/JSON listener (env IDEM_JSON_URL; default {DEFAULT_URL})")
    p.add_argument("--token", default=default(os.environ.get("IDEM_TOKEN", "")),
                   help="bearer token of your tenant (env IDEM_TOKEN)")
    p.add_argument("--tls-ca", default=default(os.environ.get("IDEM_TLS_CA") or None),
                   help="PEM CA that signed idemd's certificate (env IDEM_TLS_CA)")
    p.add_argument("--timeout", type=duration, default=default(10.0), help="each request's timeout (default 10s)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m idem", description=__doc__.split("\n\n")[0],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _connection_flags(p, defaults=True)
    connection = _Parser(add_help=False)
    _connection_flags(connection, defaults=False)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help, parents=[connection])
        c.add_argument("-n", "--namespace", required=True)
        c.add_argument("-k", "--key", required=True)
        return c

    c = command("claim", "ask for the right to run a job; prints the lease token when acquired")
    fp = c.add_mutually_exclusive_group()
    fp.add_argument("--fingerprint", metavar="HEX", help="the request's fingerprint, in hex")
    fp.add_argument("--fingerprint-of", metavar="FILE", help="fingerprint the bytes of FILE (- for stdin) with SHA-256")
    c.add_argument("--lease-ttl", type=duration)
    c.add_argument("--retention", type=duration)
    c.add_argument("--claimant", default="")
    c.add_argument("--wait", type=duration, help="wait up to this long (at most 60s) for the holder to finish")
    c.add_argument("--result-out", metavar="FILE", help="write the stored result of a replay to FILE (- for stdout)")

    def with_token(c: argparse.ArgumentParser) -> None:
        c.add_argument("--lease-token", "--fencing-token", dest="lease_token", type=int,
                       help="the token claim printed (env IDEM_LEASE_TOKEN)")

    c = command("complete", "record success and a result")
    with_token(c)
    res = c.add_mutually_exclusive_group()
    res.add_argument("--result", help="the result, as text")
    res.add_argument("--result-file", metavar="FILE", help="the result, the bytes of FILE (- for stdin)")

    c = command("fail", "record failure; --retryable hands the job back")
    with_token(c)
    c.add_argument("--error", required=True, help="what went wrong")
    c.add_argument("--retryable", action="store_true", help="release the job for the next Claim instead of failing it for good")

    c = command("heartbeat", "extend a running job's lease")
    with_token(c)
    c.add_argument("--lease-ttl", type=duration)

    c = command("lookup", "print a record as JSON")
    c.add_argument("--result-out", metavar="FILE", help="write the raw result to FILE (- for stdout) instead")
    return p


def run(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("complete", "fail", "heartbeat") and args.lease_token is None:
        env = os.environ.get("IDEM_LEASE_TOKEN")
        if not env:
            print(f"idem: {args.command} needs --lease-token (the token claim printed)", file=sys.stderr)
            return EXIT_ERROR
        try:
            args.lease_token = int(env)
        except ValueError:
            print(f"idem: IDEM_LEASE_TOKEN is {env!r}; it must be the integer token claim printed", file=sys.stderr)
            return EXIT_ERROR
    try:
        client = Client(args.url, token=args.token, timeout=args.timeout, ca_file=args.tls_ca,
                        retry=RetryPolicy(max_attempts=3))
    except (ValueError, OSError) as err:
        _say(err)
        return EXIT_ERROR
    try:
        with client:
            return _command(client, args)
    except IdemError as err:
        print(err, file=sys.stderr)
        return exit_code(err)
    except (OSError, ValueError) as err:
        _say(err)
        return EXIT_ERROR


def _say(err: BaseException) -> None:
    """Prints err on stderr after "idem: ", which the package's own
    messages start with already."""
    text = str(err)
    print(text if text.startswith("idem: ") else "idem: " + text, file=sys.stderr)


def _command(client: Client, args: Any) -> int:
    ns, key = args.namespace, args.key
    if args.command == "claim":
        fp = b""
        if args.fingerprint:
            try:
                fp = bytes.fromhex(args.fingerprint)
            except ValueError:
                print(f"idem: --fingerprint {args.fingerprint!r} is not hex", file=sys.stderr)
                return EXIT_ERROR
        elif args.fingerprint_of:
            fp = fingerprint(_read(args.fingerprint_of))
        res = client.claim(ns, key, fingerprint=fp, lease_ttl=args.lease_ttl, retention=args.retention,
                           claimant=args.claimant, wait=args.wait)
        if res.outcome == Outcome.ACQUIRED:
            print(res.record.token)
            return EXIT_OK
        if res.outcome == Outcome.COMPLETED:
            _write(args.result_out, res.record.result)
            return EXIT_COMPLETED
        print(f"idem: {ns}/{key} failed permanently earlier: {res.record.error}", file=sys.stderr)
        return EXIT_FAILED
    if args.command == "complete":
        result = args.result.encode("utf-8") if args.result is not None else (
            _read(args.result_file) if args.result_file else b"")
        client.complete(ns, key, args.lease_token, result)
        return EXIT_OK
    if args.command == "fail":
        client.fail(ns, key, args.lease_token, args.error, retryable=args.retryable)
        return EXIT_OK
    if args.command == "heartbeat":
        client.heartbeat(ns, key, args.lease_token, args.lease_ttl)
        return EXIT_OK
    rec = client.lookup(ns, key)
    if args.result_out:
        _write(args.result_out, rec.result)
    else:
        print(json.dumps(rec.to_json(), indent=2, ensure_ascii=False))
    return EXIT_OK


def main() -> None:
    try:
        sys.exit(run())
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
