#!/usr/bin/python3
"""An HTTP proxy that verifies AWS Signature Version 4 the way S3 does, in
front of an S3-compatible server that does not (s3rver).

Every request must carry an `Authorization: AWS4-HMAC-SHA256 ...` header for
the configured access key, an `x-amz-date` within 15 minutes, and an
`x-amz-content-sha256` that is either the hex SHA-256 of the body or
UNSIGNED-PAYLOAD; the signature is recomputed from the canonical request
(method, URI path as sent, sorted query, the signed headers) with an
independent implementation (Python's hmac/hashlib) and must match. Rejected
requests get S3's XML error (403 SignatureDoesNotMatch, InvalidAccessKeyId,
XAmzContentSHA256Mismatch, ...). Accepted ones are forwarded unchanged.

    sigv4_proxy.py --port=0 --upstream=127.0.0.1:4568 \
        --access_key=S3RVER --secret_key=S3RVER [--port_file=F]

Counts (accepted, rejected, multipart parts, aborts, injected failures) are
printed on exit and served at GET /__sigv4_stats (not forwarded).
--fail_every=N answers every Nth correctly signed request with 503 SlowDown
instead of forwarding it, to exercise clients' retries.
"""
import argparse
import datetime
import hashlib
import hmac
import http.client
import http.server
import json
import socketserver
import sys
import threading
import urllib.parse

STATS = {
    "accepted": 0,
    "rejected": 0,
    "parts": 0,
    "injected_503": 0,
    "aborts": 0,
    # GETs with a Range header, and the body bytes of GETs without one.
    "ranged_gets": 0,
    "whole_get_bytes": 0,
}
LOCK = threading.Lock()


def sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def uri_encode(s, keep_slash):
    safe = "-_.~" + ("/" if keep_slash else "")
    return urllib.parse.quote(s, safe=safe)


def canonical_query(raw):
    pairs = []
    for part in raw.split("&") if raw else []:
        k, _, v = part.partition("=")
        # Decode then encode again: S3 canonicalizes whatever was sent.
        pairs.append(
            (uri_encode(urllib.parse.unquote(k), False), uri_encode(urllib.parse.unquote(v), False))
        )
    pairs.sort()
    return "&".join(f"{k}={v}" for k, v in pairs)


def verify(method, raw_path, headers, body, access_key, secret_key, session_token=""):
    """Returns None if the request is correctly signed, else (code, message).
    With `session_token` (temporary credentials), the request must carry it
    in x-amz-security-token, and sign that header, as S3 requires."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return ("AccessDenied", "missing or non-SigV4 Authorization header")
    fields = {}
    for item in auth[len("AWS4-HMAC-SHA256 ") :].split(","):
        k, _, v = item.strip().partition("=")
        fields[k] = v
    try:
        key_id, date, region, service, terminator = fields["Credential"].split("/")
        signed_headers = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        return ("AuthorizationHeaderMalformed", f"cannot parse: {auth}")
    if key_id != access_key:
        return ("InvalidAccessKeyId", f"unknown access key {key_id}")
    if service != "s3" or terminator != "aws4_request":
        return ("AuthorizationHeaderMalformed", "scope must be .../s3/aws4_request")
    for required in ("host", "x-amz-date", "x-amz-content-sha256"):
        if required not in signed_headers:
            return ("AccessDenied", f"header {required} is not signed")
    if session_token:
        if headers.get("x-amz-security-token", "") != session_token:
            return ("InvalidToken", "the security token is missing or wrong")
        if "x-amz-security-token" not in signed_headers:
            return ("AccessDenied", "header x-amz-security-token is not signed")
    amz_date = headers.get("x-amz-date", "")
    try:
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc
        )
    except ValueError:
        return ("AccessDenied", f"bad x-amz-date {amz_date!r}")
    if not amz_date.startswith(date):
        return ("SignatureDoesNotMatch", "credential date differs from x-amz-date")
    skew = abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds())
    if skew > 900:
        return ("RequestTimeTooSkewed", f"x-amz-date is {skew:.0f} s off")
    payload_hash = headers.get("x-amz-content-sha256", "")
    if payload_hash != "UNSIGNED-PAYLOAD" and payload_hash != hashlib.sha256(body).hexdigest():
        return ("XAmzContentSHA256Mismatch", "x-amz-content-sha256 does not match the body")
    path, _, query = raw_path.partition("?")
    canonical_headers = "".join(
        f"{h}:{' '.join(headers.get(h, '').strip().split())}\n" for h in signed_headers
    )
    canonical_request = "\n".join(
        [
            method,
            path,
            canonical_query(query),
            canonical_headers,
            ";".join(signed_headers),
            payload_hash,
        ]
    )
    scope = f"{date}/{region}/{service}/{terminator}"
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            amz_date,
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )
    k = sign(("AWS4" + secret_key).encode(), date)
    k = sign(k, region)
    k = sign(k, service)
    k = sign(k, "aws4_request")
    expected = hmac.new(k, string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return (
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature "
            f"you provided. Canonical request: {canonical_request!r}",
        )
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.command == "GET" and self.path == "/__sigv4_stats":
            with LOCK:
                data = json.dumps(STATS).encode()
            return self._reply(200, data, {"Content-Type": "application/json"})
        headers = {k.lower(): v for k, v in self.headers.items()}
        error = verify(
            self.command,
            self.path,
            headers,
            body,
            self.server.access_key,
            self.server.secret_key,
            self.server.session_token,
        )
        if error is not None:
            with LOCK:
                STATS["rejected"] += 1
            code, message = error
            sys.stderr.write(f"sigv4_proxy: rejected {self.command} {self.path}: {code}\n")
            xml = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>{message}</Message></Error>"
            ).encode()
            return self._reply(403, xml, {"Content-Type": "application/xml"})
        with LOCK:
            STATS["accepted"] += 1
            n = STATS["accepted"]
            if "partNumber=" in self.path:
                STATS["parts"] += 1
            if self.command == "DELETE" and "uploadId=" in self.path:
                STATS["aborts"] += 1
            inject = self.server.fail_every and n % self.server.fail_every == 0
            if inject:
                STATS["injected_503"] += 1
        if inject:
            xml = (
                b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown'
                b"</Code><Message>injected by sigv4_proxy</Message></Error>"
            )
            return self._reply(503, xml, {"Content-Type": "application/xml"})
        conn = http.client.HTTPConnection(self.server.upstream, timeout=600)
        forward = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in ("connection", "transfer-encoding")
        }
        forward["Content-Length"] = str(len(body))
        conn.request(self.command, self.path, body=body, headers=forward)
        resp = conn.getresponse()
        data = resp.read()
        out = {
            k: v
            for k, v in resp.getheaders()
            if k.lower() not in ("connection", "transfer-encoding", "content-length")
        }
        if self.command == "GET":
            with LOCK:
                if "range" in headers:
                    STATS["ranged_gets"] += 1
                else:
                    STATS["whole_get_bytes"] += len(data)
        self._reply(resp.status, data, out)
        conn.close()

    def _reply(self, status, data, headers):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--upstream", required=True, help="host:port of the S3 server")
    p.add_argument("--access_key", default="S3RVER")
    p.add_argument("--secret_key", default="S3RVER")
    p.add_argument(
        "--session_token",
        default="",
        help="require this x-amz-security-token (temporary credentials)",
    )
    p.add_argument("--port_file", help="write the bound port here")
    p.add_argument(
        "--fail_every",
        type=int,
        default=0,
        help="answer every Nth signed request 503 SlowDown (retry tests)",
    )
    args = p.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    server.upstream = args.upstream
    server.access_key, server.secret_key = args.access_key, args.secret_key
    server.session_token = args.session_token
    server.fail_every = args.fail_every
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(port))
        import os

        os.rename(args.port_file + ".tmp", args.port_file)
    print(f"sigv4_proxy: listening on 127.0.0.1:{port}, upstream {args.upstream}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    print(f"sigv4_proxy: {STATS}", flush=True)


if __name__ == "__main__":
    main()
