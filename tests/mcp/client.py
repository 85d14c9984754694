"""The official MCP Python SDK's client against the gateway's /mcp, one scenario per run.

    python client.py URL KEY SCENARIO

Prints one JSON object: what the scenario saw. The Rust tests (tests/it/mcp) assert on it.
"""

import asyncio
import json
import sys
from datetime import timedelta

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

url, key, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {"Authorization": f"Bearer {key}"}
out = {}


async def all_tools(s):
    names, cursor = [], None
    pages = 0
    while True:
        r = await s.list_tools(cursor=cursor) if cursor else await s.list_tools()
        pages += 1
        names += [t.name for t in r.tools]
        cursor = r.nextCursor
        if not cursor:
            return names, pages


def text(result):
    return "".join(c.text for c in result.content if c.type == "text")


async def sample(context, params):
    asked = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"an answer to {asked}"),
        model="stand-in",
    )


async def basic(s):
    out["tools"], out["pages"] = await all_tools(s)
    out["echo"] = text(await s.call_tool("a__echo", {"text": "hi"}))
    progress = []

    async def on_progress(p, total, message):
        progress.append([p, total, message])

    out["slow"] = text(await s.call_tool("a__slow", {"steps": 3}, progress_callback=on_progress))
    out["progress"] = progress
    out["sampled"] = text(await s.call_tool("a__ask_llm", {"question": "why?"}))
    prompts = await s.list_prompts()
    out["prompts"] = [p.name for p in prompts.prompts]
    got = await s.get_prompt("a__greet", {"name": "Ada"})
    out["prompt"] = got.messages[0].content.text
    res = await s.list_resources()
    out["resources"] = sorted([r.name for r in res.resources])
    out["resource_uris"] = sorted([str(r.uri) for r in res.resources])
    read = await s.read_resource("notes://today")
    out["read"] = read.contents[0].text
    templ = await s.read_resource("users://42/profile")
    out["read_template"] = templ.contents[0].text
    try:
        await s.call_tool("a__delete_item", {"item": "x"})
        out["denied"] = "called"
    except McpError as e:
        out["denied"] = {"code": e.error.code, "message": e.error.message}
    r = await s.call_tool("b__whoami", {})
    out["b"] = text(r)


async def list_changed(s):
    changed = anyio.Event()

    async def on_message(m):
        if isinstance(m, types.ServerNotification) and isinstance(
            m.root, types.ToolListChangedNotification
        ):
            changed.set()

    s._message_handler = on_message
    before, _ = await all_tools(s)
    added = text(await s.call_tool("a__grow", {}))
    with anyio.fail_after(10):
        await changed.wait()
    after, _ = await all_tools(s)
    out["added"] = "a__" + added
    out["before"] = before
    out["after"] = after


async def cancel(s):
    started = anyio.Event()

    async def on_progress(p, total, message):
        started.set()

    result = {}

    async def call():
        try:
            await s.call_tool(
                "a__sleepy", {}, progress_callback=on_progress,
                read_timeout_seconds=timedelta(seconds=10),
            )
            result["call"] = "answered"
        except McpError as e:
            result["call"] = {"code": e.error.code, "message": e.error.message}

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            await started.wait()
        request_id = s._request_id - 1
        await s.send_notification(
            types.ClientNotification(
                types.CancelledNotification(
                    params=types.CancelledNotificationParams(requestId=request_id, reason="enough")
                )
            )
        )
    out["call"] = result["call"]
    for _ in range(50):
        state = text(await s.call_tool("a__sleepy_state", {}))
        if state == "cancelled":
            break
        await asyncio.sleep(0.1)
    out["server_saw"] = state


async def failover(s):
    out["who"] = [text(await s.call_tool("r__whoami", {})) for _ in range(3)]
    try:
        r = await s.call_tool("r__delete_item", {"item": "x"})
        out["delete"] = text(r)
    except McpError as e:
        out["delete"] = {"code": e.error.code, "message": e.error.message, "data": e.error.data}


async def session_id(s, get_id):
    out["session"] = get_id()
    out["echo"] = text(await s.call_tool("a__echo", {"text": "first"}))


SCENARIOS = {"basic": basic, "list_changed": list_changed, "cancel": cancel, "failover": failover}


async def main():
    async with streamablehttp_client(url, headers=headers) as (read, write, get_id):
        async with ClientSession(read, write, sampling_callback=sample) as s:
            init = await s.initialize()
            out["protocol"] = init.protocolVersion
            out["capabilities"] = init.capabilities.model_dump(exclude_none=True)
            await SCENARIOS[scenario](s)
    print(json.dumps(out))


anyio.run(main)
