"""FastMCP servers (the official MCP Python SDK) that stand behind the gateway in the tests.

    python servers.py --name NAME [--token T] [--port P] [--transport streamable-http|sse|stdio]

Binds 127.0.0.1 on P (by default a port the OS picks), prints `PORT <n>` and serves until killed
(Streamable HTTP at /mcp, or the older HTTP+SSE transport at /sse); with stdio, speaks on its
standard input and output instead. Every
replica of a server is the same server with another NAME: `whoami` tells which answered.
With --token, a call without `Authorization: Bearer T` is refused 401.
"""

import argparse
import asyncio
import logging
import socket
import sys

import anyio
import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import Completion, SamplingMessage, TextContent, ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--name", required=True)
parser.add_argument("--token")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--transport", default="streamable-http", choices=["streamable-http", "sse", "stdio"])
parser.add_argument("--json", action="store_true", help="stateless, answers as JSON (for bench/mcp.sh)")
args = parser.parse_args()

mcp = FastMCP(args.name, stateless_http=args.json, json_response=args.json, log_level="ERROR")
# The SDK logs each request, and a traceback when a session's stream closes: not news here.
logging.getLogger("mcp").setLevel(logging.ERROR)
logging.getLogger("mcp.server.streamable_http").setLevel(logging.CRITICAL)
state = {"deletes": 0, "sleepy": "idle", "added": 0}


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Say it back."""
    return text


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def whoami() -> str:
    """Which replica answered."""
    return args.name


@mcp.tool(annotations=ToolAnnotations(idempotentHint=True))
def add(a: int, b: int) -> int:
    return a + b


@mcp.tool()
def delete_item(item: str) -> str:
    """Acts: not read-only, not idempotent."""
    state["deletes"] += 1
    return f"deleted {item}"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def deletes() -> int:
    """How many times delete_item ran here."""
    return state["deletes"]


@mcp.tool()
async def slow(steps: int, ctx: Context) -> str:
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await asyncio.sleep(0.01)
    return f"done in {steps}"


@mcp.tool()
async def sleepy(ctx: Context) -> str:
    state["sleepy"] = "running"
    await ctx.report_progress(0, 1, "started")
    try:
        await asyncio.sleep(30)
    except BaseException:
        state["sleepy"] = "cancelled"
        raise
    state["sleepy"] = "finished"
    return "woke"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def sleepy_state() -> str:
    return state["sleepy"]


@mcp.tool()
async def ask_llm(question: str, ctx: Context) -> str:
    """Asks the client's model (sampling, relayed by the gateway)."""
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=20,
        related_request_id=ctx.request_id,
    )
    return f"the model said: {result.content.text}"


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool, and says the list changed."""
    state["added"] += 1
    n = state["added"]

    def fresh() -> str:
        return f"fresh {n}"

    mcp.add_tool(fresh, name=f"fresh_{n}")
    await ctx.session.send_tool_list_changed()
    return f"fresh_{n}"


@mcp.prompt()
def greet(name: str) -> str:
    return f"Hello, {name}, from {args.name}"


@mcp.completion()
async def complete(ref, argument, context):
    """Names for greet's `name`, from this replica."""
    return Completion(values=[f"{argument.value}da", f"{argument.value}lan"], hasMore=False)


@mcp.resource("notes://today")
def today() -> str:
    return f"notes of {args.name}"


@mcp.resource("users://{uid}/profile")
def profile(uid: str) -> str:
    return f"profile {uid}"


@mcp.tool()
def exit_now() -> str:
    """Ends this server's process (a stdio server dying)."""
    import os

    os._exit(3)


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def pid() -> int:
    import os

    return os.getpid()


if args.transport == "stdio":
    mcp.run("stdio")
    sys.exit(0)

app = mcp.sse_app() if args.transport == "sse" else mcp.streamable_http_app()

if args.token:
    inner = app

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            if auth != f"Bearer {args.token}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    app = guarded

sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
# Accepted connections inherit it: uvicorn's h11 writes a response's head and body apart, and
# with Nagle on a kept-alive connection the body waits ~40 ms for the client's delayed ACK.
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
sock.bind(("127.0.0.1", args.port))
print(f"PORT {sock.getsockname()[1]}", flush=True)
config = uvicorn.Config(app, log_level="warning", lifespan="on")
server = uvicorn.Server(config)
anyio.run(server.serve, [sock])
