"""A mock of Google Vertex AI for the gateway's tests, checking what Google checks with an
implementation the gateway did not write. It makes a service account (an RSA key, by
`cryptography`) and writes its key file; its token endpoint verifies each JWT-bearer assertion's
RS256 signature, issuer, audience, scope and expiry with google-auth and issues short-lived
tokens; its metadata server issues them to a caller that says `Metadata-Flavor: Google`. Its
Vertex endpoints refuse a missing, unknown or expired token (401 UNAUTHENTICATED), check each
publisher's body (Claude's `anthropic_version`, no `model`), and are answered by a `switchyard
mock` behind them (Gemini, Anthropic and OpenAI as that mock speaks them).

    python tests/mocks/vertex.py --upstream http://127.0.0.1:PORT --write-key sa.json
        [--token-ttl SECONDS]

Prints `vertex mock listening on http://127.0.0.1:PORT`. `GET /_mock/requests`, `GET
/_mock/stats` (token grants), `POST /_mock/revoke` (every token issued so far stops working).
"""

import argparse
import http.client
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

LOCK = threading.Lock()
STATE = {"tokens": {}, "grants": 0, "metadata_grants": 0, "requests": []}
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def google_error(code, status, message):
    return {"error": {"code": code, "message": message, "status": status}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, delayed ACKs hold each answer 40 ms.
    disable_nagle_algorithm = True
    opts = None
    public_pem = None
    email = None

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("content-length", 0) or 0)
        return self.rfile.read(n) if n else b""

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def issue(self):
        token = "ya29.mock-" + secrets.token_urlsafe(24)
        with LOCK:
            STATE["tokens"][token] = time.time() + self.opts.token_ttl
        return {"access_token": token, "expires_in": self.opts.token_ttl, "token_type": "Bearer"}

    def do_GET(self):
        if self.path == "/_mock/requests":
            with LOCK:
                return self.reply(200, STATE["requests"])
        if self.path == "/_mock/stats":
            with LOCK:
                return self.reply(200, {"grants": STATE["grants"], "metadata_grants": STATE["metadata_grants"]})
        if self.path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if self.headers.get("metadata-flavor") != "Google":
                return self.reply(403, {"error": "missing Metadata-Flavor"})
            with LOCK:
                STATE["metadata_grants"] += 1
            return self.reply(200, self.issue())
        self.reply(404, google_error(404, "NOT_FOUND", "no such route"))

    def do_POST(self):
        raw = self.body()
        if self.path == "/_mock/revoke":
            with LOCK:
                STATE["tokens"].clear()
            return self.reply(200, {"ok": True})
        if self.path == "/token":
            return self.grant(raw)
        auth = self.headers.get("authorization", "")
        with LOCK:
            expires = STATE["tokens"].get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None
            STATE["requests"].append({"path": self.path, "body": raw.decode("utf-8", "replace"),
                                      "token_ok": expires is not None and expires > time.time()})
        if expires is None or expires < time.time():
            return self.reply(401, google_error(401, "UNAUTHENTICATED",
                                                "Request had invalid authentication credentials."))
        return self.vertex(urllib.parse.urlsplit(self.path), raw)

    def grant(self, raw):
        form = dict(urllib.parse.parse_qsl(raw.decode()))
        with LOCK:
            STATE["grants"] += 1
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return self.reply(400, {"error": "unsupported_grant_type"})
        try:
            claims = jwt.decode(form.get("assertion", ""), certs=self.public_pem,
                                audience=f"{self.opts.base}/token")
        except Exception as e:  # noqa: BLE001 - any refusal of google-auth is a refused grant
            return self.reply(400, {"error": "invalid_grant", "error_description": str(e)})
        if claims.get("iss") != self.email or SCOPE not in claims.get("scope", "").split():
            return self.reply(400, {"error": "invalid_grant", "error_description": "wrong issuer or scope"})
        self.reply(200, self.issue())

    def vertex(self, url, raw):
        parts = url.path.split("/")
        # /v1/projects/{p}/locations/{l}/publishers/{pub}/models/{m}:{action}
        # /v1/projects/{p}/locations/{l}/endpoints/openapi/chat/completions
        if len(parts) < 7 or parts[2] != "projects" or parts[4] != "locations":
            return self.reply(404, google_error(404, "NOT_FOUND", "no such route"))
        rest = parts[6:]
        body = json.loads(raw or b"{}")
        if rest[:2] == ["endpoints", "openapi"]:
            return self.forward("/v1/chat/completions", body)
        if len(rest) != 4 or rest[0] != "publishers" or rest[2] != "models" or ":" not in rest[3]:
            return self.reply(404, google_error(404, "NOT_FOUND", "no such route"))
        publisher, (model, action) = rest[1], rest[3].split(":", 1)
        if publisher == "google" and action == "predict":
            preds = [{"embeddings": {"values": [0.1 * (i + 1), 0.2, 0.3],
                                     "statistics": {"token_count": len(x.get("content", "").split()), "truncated": False}}}
                     for i, x in enumerate(body.get("instances", []))]
            return self.reply(200, {"predictions": preds})
        if publisher == "google" and action in ("generateContent", "streamGenerateContent"):
            query = "?alt=sse" if action == "streamGenerateContent" else ""
            return self.forward(f"/v1beta/models/{model}:{action}{query}", body)
        if publisher == "anthropic" and action in ("rawPredict", "streamRawPredict"):
            if body.get("anthropic_version") != "vertex-2023-10-16":
                return self.reply(400, google_error(400, "INVALID_ARGUMENT", "anthropic_version must be vertex-2023-10-16"))
            if "model" in body:
                return self.reply(400, google_error(400, "INVALID_ARGUMENT", "model is not allowed in the body"))
            if (action == "streamRawPredict") != bool(body.get("stream")):
                return self.reply(400, google_error(400, "INVALID_ARGUMENT", "stream does not match the method"))
            body = dict(body, model=model)
            del body["anthropic_version"]
            return self.forward("/v1/messages", body)
        self.reply(404, google_error(404, "NOT_FOUND", f"no {publisher} model action {action}"))

    def forward(self, path, body):
        """Answers with the switchyard mock behind, streamed as it streams."""
        up = urllib.parse.urlsplit(self.opts.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json",
                                                      "authorization": "Bearer upstream-key"})
        resp = conn.getresponse()
        self.send_response(resp.status)
        self.send_header("content-type", resp.getheader("content-type", "application/json"))
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--upstream", required=True)
    p.add_argument("--write-key", required=True)
    p.add_argument("--token-ttl", type=int, default=3600)
    opts = p.parse_args()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    Handler.public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    Handler.email = "gateway@switchyard-tests.iam.gserviceaccount.com"
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    server.daemon_threads = True
    opts.base = f"http://127.0.0.1:{server.server_address[1]}"
    Handler.opts = opts
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    with open(opts.write_key, "w") as f:
        json.dump({"type": "service_account", "project_id": "switchyard-tests", "private_key_id": "k1",
                   "private_key": pem, "client_email": Handler.email, "token_uri": f"{opts.base}/token"}, f)
    print(f"vertex mock listening on {opts.base}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
