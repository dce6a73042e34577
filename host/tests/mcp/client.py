"""Drives `maestro mcp` with the official MCP Python SDK, as a client someone else wrote: it
lists the tools, calls one, calls a tool that parks for approval and answers (or declines) the
elicitation, calls it from a client that cannot be asked, and probes an unknown method.

Usage:
  client.py tour MAESTRO_BINARY PLUGIN_DIR       the above, over stdio
  client.py gate MAESTRO_BINARY PLUGIN_DIR ARGS  echo under the operator's approval gate (which
                                                 ARGS for maestro set): approved, then denied
  client.py http URL TOKEN                       over streamable HTTP with a bearer token: list,
                                                 call, approve; then print `listed` and wait for a
                                                 line on stdin, after which a plugin changed: wait
                                                 for the server to say so and list again
Prints one JSON document with what the client saw, for the Rust test to check.
"""

import json
import sys
from typing import Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

SCENARIO = sys.argv[1]
if SCENARIO != "http":
    MAESTRO, PLUGINS, EXTRA = sys.argv[2], sys.argv[3], sys.argv[4:]
    TARGET = StdioServerParameters(command=MAESTRO, args=["mcp", "--plugins", PLUGINS, *EXTRA])
ROTATE = {
    "tool": "RotateKey",
    "reason": "Rotate the staging API key as the user asked.",
    "arguments": {"service": "staging", "revoke_old_after_minutes": 60},
}


class Unknown(types.Request[types.RequestParams | None, Literal["maestro/no-such-method"]]):
    method: Literal["maestro/no-such-method"] = "maestro/no-such-method"
    params: types.RequestParams | None = None


def result(r):
    return {"is_error": bool(r.is_error), "text": "".join(c.text for c in r.content if c.type == "text")}


def answering(reply):
    """An elicitation callback that records what it was asked and replies with `reply`."""
    asked = []

    async def callback(context, params):
        asked.append({"message": params.message, "schema": params.requested_schema})
        return reply

    return asked, callback


async def tour():
    seen = {}
    async with Client(TARGET) as client:
        seen["protocol_version"] = client.protocol_version
        tools = await client.list_tools()
        seen["tools"] = {t.name: {"description": t.description, "schema": t.input_schema} for t in tools.tools}
        seen["echo"] = result(await client.call_tool("echo", {"text": "hello, sandbox"}))
        seen["invalid"] = result(await client.call_tool("echo", {"text": 7}))
        # A method the server does not know is an error, and the connection goes on.
        try:
            await client.session.send_request(Unknown(), types.Result)
            seen["unknown_method"] = "answered"
        except MCPError as error:
            seen["unknown_method"] = {"code": error.error.code, "message": error.error.message}
        seen["tools_after_unknown"] = len((await client.list_tools()).tools)
        # Not a client that can be asked: the park comes back as a result saying so.
        seen["unasked"] = result(await client.call_tool("RequestTool", ROTATE))

    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with Client(TARGET, elicitation_callback=approve) as client:
        seen["approved"] = result(await client.call_tool("RequestTool", ROTATE))
        seen["approved_asked"] = asked

    asked, answer = answering(types.ElicitResult(action="accept", content={"answer": "Lisbon"}))
    async with Client(TARGET, elicitation_callback=answer) as client:
        question = {"status": "needs_user_input", "question": "Which city?"}
        seen["answered"] = result(await client.call_tool("complete", question))
        seen["answered_asked"] = asked

    asked, decline = answering(types.ElicitResult(action="decline"))
    async with Client(TARGET, elicitation_callback=decline) as client:
        seen["declined"] = result(await client.call_tool("RequestTool", ROTATE))
        seen["declined_asked"] = asked

    return seen


async def gate():
    seen = {}
    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with Client(TARGET, elicitation_callback=approve) as client:
        seen["approved"] = result(await client.call_tool("echo", {"text": "gated"}))
        seen["approved_asked"] = asked
    reply = types.ElicitResult(action="accept", content={"decision": "deny", "reason": "not now"})
    asked, deny = answering(reply)
    async with Client(TARGET, elicitation_callback=deny) as client:
        seen["denied"] = result(await client.call_tool("echo", {"text": "gated"}))
        seen["denied_asked"] = asked
    return seen


async def http():
    url, token = sys.argv[2], sys.argv[3]
    seen = {}
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http_client:
        target = streamable_http_client(url, http_client=http_client)
        async with Client(target, elicitation_callback=approve, message_handler=on_message) as client:
            seen["protocol_version"] = client.protocol_version
            seen["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
            seen["approved"] = result(await client.call_tool("RequestTool", ROTATE))
            seen["approved_asked"] = asked
            print("listed", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            with anyio.fail_after(60):
                await changed.wait()
            seen["tools_after_change"] = sorted(t.name for t in (await client.list_tools()).tools)
            seen["echo"] = result(await client.call_tool("echo", {"text": "hot loaded"}))
    return seen


async def main():
    print(json.dumps(await {"tour": tour, "gate": gate, "http": http}[SCENARIO]()))


anyio.run(main)
