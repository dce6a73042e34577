"""Drives `maestro mcp` with the official MCP Python SDK, as a client someone else wrote: it
lists the tools, calls one, calls a tool that parks for approval and answers (or declines) the
elicitation, calls it from a client that cannot be asked, and probes an unknown method.

Usage: client.py MAESTRO_BINARY PLUGIN_DIR SCENARIO [EXTRA_ARGS...], SCENARIO `tour` (the
above) or `gate` (echo under the operator's approval gate, which EXTRA_ARGS set: approved, then
denied). Prints one JSON document with what the client saw, for the Rust test to check.
"""

import json
import sys
from typing import Literal

import anyio
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters

MAESTRO, PLUGINS, SCENARIO, EXTRA = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
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


async def main():
    print(json.dumps(await {"tour": tour, "gate": gate}[SCENARIO]()))


anyio.run(main)
