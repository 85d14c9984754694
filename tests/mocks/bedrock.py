"""A mock of AWS Bedrock's runtime for the gateway's tests, checking what Bedrock checks with an
implementation the gateway did not write: every SigV4 signature is recomputed by botocore's
SigV4Auth (with the request's own date, host and signed headers) and compared; a Bedrock API
key must be one it was given. It answers Converse, ConverseStream (real event-stream frames, read
back by botocore's own parser before they go out), InvokeModel and
InvokeModelWithResponseStream with an Anthropic Messages body, and plays any exception when
told. It also serves STS AssumeRoleWithWebIdentity (XML) and a container credentials endpoint,
which issue short-lived credentials that its Bedrock endpoints then accept.

    python tests/mocks/bedrock.py --access-key AK --secret-key SK [--api-key K] [--text T]
        [--tool-call NAME=JSON] [--web-identity-token TOKEN] [--container-token TOKEN]
        [--sts-ttl SECONDS]

Prints `bedrock mock listening on http://127.0.0.1:PORT`. Control: `POST /_mock/script` with
`{"faults": [...]}` (one per request that follows: `null` for a normal answer, or an object
`{"exception": "ThrottlingException", "status": 429, "in_stream": "before" | "after"}`),
`GET /_mock/requests` (every request: path, the signed headers, the body as sent, and whether its
signature held), `GET /_mock/stats`.
"""

import argparse
import base64
import datetime
import json
import secrets
import struct
import sys
import threading
import time
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

LOCK = threading.Lock()
STATE = {"script": [], "requests": [], "sts_calls": 0, "container_calls": 0, "creds": {}}
STATUS = {
    "ThrottlingException": 429, "ServiceUnavailableException": 503, "InternalServerException": 500,
    "ModelNotReadyException": 429, "ModelTimeoutException": 408, "AccessDeniedException": 403,
    "UnrecognizedClientException": 403, "ExpiredTokenException": 403, "ValidationException": 400,
    "ModelStreamErrorException": 424,
}


def frame(headers, payload):
    """One event-stream message: string headers, a payload, both CRCs."""
    hb = b"".join(bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v.encode())) + v.encode()
                  for k, v in headers.items())
    total = 12 + len(hb) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hb))
    msg = prelude + struct.pack(">I", zlib.crc32(prelude)) + hb + payload
    out = msg + struct.pack(">I", zlib.crc32(msg))
    # Read back by botocore's own parser: a frame it cannot read never goes out.
    buf = EventStreamBuffer()
    buf.add_data(out)
    parsed = next(iter(buf))
    assert parsed.payload == payload, "botocore read back another payload"
    return out


def event(kind, body):
    return frame({":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
                 json.dumps(body).encode())


def exception(kind, message):
    return frame({":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
                 json.dumps({"message": message}).encode())


def verify_sigv4(handler, body, region):
    """Recomputes the request's signature with botocore; returns (ok, why)."""
    auth = handler.headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return False, "not SigV4"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    access_key, date, reg, service, _ = fields["Credential"].split("/")
    if reg != region or service != "bedrock":
        return False, f"signed for {reg}/{service}"
    with LOCK:
        known = STATE["creds"].get(access_key)
    if known is None:
        return False, "unknown access key"
    secret, token, expires = known
    if expires is not None and expires < time.time():
        return False, "expired"
    if token is not None and handler.headers.get("x-amz-security-token") != token:
        return False, "wrong session token"
    amz_date = handler.headers.get("x-amz-date", "")
    when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 300:
        return False, "date too far from now"
    signed = fields["SignedHeaders"].split(";")
    headers = {h: handler.headers.get(h, "") for h in signed}
    host = handler.headers.get("host")
    req = AWSRequest(method=handler.command, url=f"http://{host}{handler.path}", data=body, headers=headers)
    req.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(access_key, secret, token), "bedrock", region)
    canonical = signer.canonical_request(req)
    expected = signer.signature(signer.string_to_sign(req, canonical), req)
    if expected != fields["Signature"]:
        return False, "signature does not match"
    return True, "ok"


def text_pieces(text, n=3):
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, delayed ACKs hold each answer 40 ms.
    disable_nagle_algorithm = True
    opts = None

    def log_message(self, *a):
        pass

    def body(self):
        n = int(self.headers.get("content-length", 0) or 0)
        return self.rfile.read(n) if n else b""

    def reply(self, status, body, ctype="application/json", headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def aws_error(self, kind, message, status=None):
        self.reply(status or STATUS.get(kind, 400), {"message": message},
                   headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"})

    def do_GET(self):
        if self.path == "/_mock/requests":
            with LOCK:
                return self.reply(200, STATE["requests"])
        if self.path == "/_mock/stats":
            with LOCK:
                stats = {k: STATE[k] for k in ("sts_calls", "container_calls")}
                # The temporary secrets handed out, for tests that look for them where they must not be.
                stats["issued_secrets"] = [v[i] for v in STATE["creds"].values() if v[2] for i in (0, 1)]
                return self.reply(200, stats)
        if self.path == "/container-creds":
            if self.headers.get("authorization") != self.opts.container_token:
                return self.reply(401, {"message": "bad token"})
            with LOCK:
                STATE["container_calls"] += 1
            ak, sk, tok, exp = issue(self.opts.sts_ttl)
            return self.reply(200, {"AccessKeyId": ak, "SecretAccessKey": sk, "Token": tok,
                                    "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ")})
        self.reply(404, {"message": "no such route"})

    def do_POST(self):
        raw = self.body()
        if self.path == "/_mock/script":
            with LOCK:
                STATE["script"] = json.loads(raw)["faults"]
            return self.reply(200, {"ok": True})
        if self.path == "/" and b"AssumeRoleWithWebIdentity" in raw:
            return self.sts(raw)
        parts = self.path.split("?")[0].split("/")
        if len(parts) != 4 or parts[1] != "model":
            return self.reply(404, {"message": "no such route"})
        model, action = urllib.parse.unquote(parts[2]), parts[3]
        ok, why = self.authorized(raw)
        with LOCK:
            STATE["requests"].append({"path": self.path, "model": model, "action": action, "auth_ok": ok,
                                      "why": why, "body": raw.decode("utf-8", "replace"),
                                      "signed_headers": self.headers.get("authorization", "").split("SignedHeaders=")[-1].split(",")[0]})
            fault = STATE["script"].pop(0) if STATE["script"] else None
        if not ok:
            kind = "ExpiredTokenException" if why == "expired" else (
                "InvalidSignatureException" if "signature" in why else "UnrecognizedClientException")
            return self.aws_error(kind, f"request refused: {why}", 403)
        if fault and not fault.get("in_stream"):
            return self.aws_error(fault["exception"], fault.get("message", "mock fault"), fault.get("status"))
        try:
            body = json.loads(raw)
        except ValueError:
            return self.aws_error("ValidationException", "the body is not JSON")
        if action in ("converse", "converse-stream"):
            return self.converse(body, action == "converse-stream", fault)
        if action in ("invoke", "invoke-with-response-stream"):
            return self.invoke(body, model, action == "invoke-with-response-stream", fault)
        self.reply(404, {"message": "no such action"})

    def authorized(self, raw):
        auth = self.headers.get("authorization", "")
        if auth.startswith("Bearer "):
            if auth[len("Bearer "):] in self.opts.api_key:
                return True, "api key"
            return False, "unknown api key"
        return verify_sigv4(self, raw, self.opts.region)

    def sts(self, raw):
        form = dict(urllib.parse.parse_qsl(raw.decode()))
        with LOCK:
            STATE["sts_calls"] += 1
        if form.get("WebIdentityToken") != self.opts.web_identity_token:
            return self.reply(400, b"<ErrorResponse><Error><Code>InvalidIdentityToken</Code></Error></ErrorResponse>",
                              "text/xml")
        ak, sk, tok, exp = issue(self.opts.sts_ttl)
        xml = (f'<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
               f"<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>{ak}</AccessKeyId>"
               f"<SecretAccessKey>{sk}</SecretAccessKey><SessionToken>{tok}</SessionToken>"
               f"<Expiration>{exp.strftime('%Y-%m-%dT%H:%M:%SZ')}</Expiration></Credentials>"
               f"<SubjectFromWebIdentityToken>test</SubjectFromWebIdentityToken>"
               f"</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>")
        self.reply(200, xml.encode(), "text/xml")

    def wants_tool(self, messages, result_key):
        """The tool call is the answer unless the conversation ends with its result."""
        if not self.opts.tool_call:
            return False
        last = messages[-1] if messages else {}
        content = last.get("content") if isinstance(last.get("content"), list) else []
        return not any(result_key in b or b.get("type") == "tool_result" for b in content if isinstance(b, dict))

    def converse(self, body, stream, fault):
        messages = body.get("messages") or []
        if not messages:
            return self.aws_error("ValidationException", "messages must not be empty")
        roles = [m.get("role") for m in messages]
        if roles[0] != "user" or any(a == b for a, b in zip(roles, roles[1:])):
            return self.aws_error("ValidationException", "roles must alternate, starting with user")
        for m in messages:
            for b in m.get("content") or []:
                if not isinstance(b, dict) or len(b) != 1:
                    return self.aws_error("ValidationException", "a content block has exactly one member")
        tool = self.wants_tool(messages, "toolResult")
        usage = {"inputTokens": 11, "outputTokens": 7, "totalTokens": 21, "cacheReadInputTokens": 2,
                 "cacheWriteInputTokens": 1}
        name, args = (self.opts.tool_call.split("=", 1) if tool else (None, None))
        if not stream:
            content = ([{"toolUse": {"toolUseId": "tooluse_mock1", "name": name, "input": json.loads(args)}}]
                       if tool else [{"text": self.opts.text}])
            if self.opts.reasoning:
                content.insert(0, {"reasoningContent": {"reasoningText": {"text": self.opts.reasoning,
                                                                          "signature": "bedrock-signature-1"}}})
            return self.reply(200, {"output": {"message": {"role": "assistant", "content": content}},
                                    "stopReason": "tool_use" if tool else "end_turn", "usage": usage,
                                    "metrics": {"latencyMs": 5}})
        frames = [event("messageStart", {"role": "assistant"})]
        if fault and fault.get("in_stream") == "before":
            frames.append(exception(fault["exception"], "mock fault"))
            return self.stream(frames)
        if self.opts.reasoning:
            frames.append(event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {
                "reasoningContent": {"text": self.opts.reasoning}}}))
            frames.append(event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {
                "reasoningContent": {"signature": "bedrock-signature-1"}}}))
        at = 1 if self.opts.reasoning else 0
        if tool:
            frames.append(event("contentBlockStart", {"contentBlockIndex": at, "start": {
                "toolUse": {"toolUseId": "tooluse_mock1", "name": name}}}))
            for piece in text_pieces(args):
                frames.append(event("contentBlockDelta", {"contentBlockIndex": at, "delta": {"toolUse": {"input": piece}}}))
        else:
            for piece in text_pieces(self.opts.text):
                frames.append(event("contentBlockDelta", {"contentBlockIndex": at, "delta": {"text": piece}}))
                if fault and fault.get("in_stream") == "after":
                    frames.append(exception(fault["exception"], "mock fault"))
                    return self.stream(frames)
        frames.append(event("contentBlockStop", {"contentBlockIndex": at}))
        frames.append(event("messageStop", {"stopReason": "tool_use" if tool else "end_turn"}))
        frames.append(event("metadata", {"usage": usage, "metrics": {"latencyMs": 5}}))
        self.stream(frames)

    def invoke(self, body, model, stream, fault):
        if body.get("anthropic_version") != "bedrock-2023-05-31":
            return self.aws_error("ValidationException", "anthropic_version must be bedrock-2023-05-31")
        if "model" in body or "stream" in body:
            return self.aws_error("ValidationException", "extraneous key [model] is not permitted")
        messages = body.get("messages") or []
        tool = self.wants_tool(messages, "toolResult")
        thinking = isinstance(body.get("thinking"), dict) or bool(self.opts.reasoning)
        blocks = []
        if thinking:
            blocks.append({"type": "thinking", "thinking": self.opts.reasoning or "Considering.",
                           "signature": "bedrock-signature-1"})
        if tool:
            name, args = self.opts.tool_call.split("=", 1)
            blocks.append({"type": "tool_use", "id": "toolu_bdrk_1", "name": name, "input": json.loads(args)})
        else:
            blocks.append({"type": "text", "text": self.opts.text})
        usage = {"input_tokens": 12, "output_tokens": 6, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 0}
        message = {"id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": model, "content": blocks,
                   "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None, "usage": usage}
        if not stream:
            return self.reply(200, message)
        chunk = lambda e: frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},  # noqa: E731
                                json.dumps({"bytes": base64.b64encode(json.dumps(e).encode()).decode()}).encode())
        start = dict(message, content=[], stop_reason=None, usage={"input_tokens": 12, "output_tokens": 1})
        frames = [chunk({"type": "message_start", "message": start})]
        if fault and fault.get("in_stream") == "before":
            frames.append(exception(fault["exception"], "mock fault"))
            return self.stream(frames)
        for i, b in enumerate(blocks):
            if b["type"] == "thinking":
                frames.append(chunk({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}}))
                frames.append(chunk({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": b["thinking"]}}))
                frames.append(chunk({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": b["signature"]}}))
            elif b["type"] == "tool_use":
                frames.append(chunk({"type": "content_block_start", "index": i, "content_block": dict(b, input={})}))
                frames.append(chunk({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}}))
            else:
                frames.append(chunk({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
                for piece in text_pieces(b["text"]):
                    frames.append(chunk({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}}))
                    if fault and fault.get("in_stream") == "after":
                        frames.append(exception(fault["exception"], "mock fault"))
                        return self.stream(frames)
            frames.append(chunk({"type": "content_block_stop", "index": i}))
        frames.append(chunk({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                             "usage": {"output_tokens": 6}}))
        frames.append(chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": {
            "inputTokenCount": 12, "outputTokenCount": 6, "invocationLatency": 5, "firstByteLatency": 2}}))
        self.stream(frames)

    def stream(self, frames):
        self.send_response(200)
        self.send_header("content-type", "application/vnd.amazon.eventstream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for f in frames:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(f), f))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def issue(ttl):
    """Temporary credentials the Bedrock endpoints accept until they expire."""
    ak = "ASIA" + secrets.token_hex(8).upper()
    sk = secrets.token_urlsafe(30)
    tok = secrets.token_urlsafe(60)
    with LOCK:
        STATE["creds"][ak] = (sk, tok, time.time() + ttl)
    return ak, sk, tok, datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--access-key")
    p.add_argument("--secret-key")
    p.add_argument("--session-token")
    p.add_argument("--api-key", action="append", default=[])
    p.add_argument("--text", default="Hello from Bedrock.")
    p.add_argument("--tool-call")
    p.add_argument("--reasoning", help="reasoning before the answer (reasoningContent; a thinking block)")
    p.add_argument("--web-identity-token")
    p.add_argument("--container-token")
    p.add_argument("--sts-ttl", type=int, default=3600)
    opts = p.parse_args()
    if opts.access_key:
        STATE["creds"][opts.access_key] = (opts.secret_key, opts.session_token, None)
    Handler.opts = opts
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    server.daemon_threads = True
    print(f"bedrock mock listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
