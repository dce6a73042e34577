"""Drives maestro's MCP server with the official MCP Python SDK, as a client someone else wrote:
it lists the tools, calls one, calls a tool that parks for approval and answers (or declines) the
question, calls it from a client that cannot be asked, and probes an unknown method.

MODE is `legacy` (the 2025-11-25 handshake: questions come as elicitation requests in the middle
of a call) or `auto` (the client adopts 2026-07-28 when the server offers it: questions come back
as `input_required` results, and the SDK calls again with the answer and the sealed state).

Usage:
  client.py tour MODE MAESTRO_BINARY PLUGIN_DIR       the above, over stdio
  client.py gate MODE MAESTRO_BINARY PLUGIN_DIR ARGS  echo under the operator's approval gate
                                                      (which ARGS for maestro set): approved,
                                                      then denied
  client.py rounds MAESTRO_BINARY PLUGIN_DIR          2026-07-28 by hand: a state answered twice,
                                                      altered, and sent with other arguments
  client.py traced MAESTRO_BINARY PLUGIN_DIR TRACEPARENT [ARGS]
                                                      2025-11-25: call echo with the client's
                                                      trace context in `_meta`, then without
  client.py traced-piece MAESTRO_BINARY PLUGIN_DIR TRACEPARENT ARGS
                                                      2025-11-25: call the piece `approval`
                                                      (ARGS for `maestro mcp`: --jobs and its config) with the
                                                      client's trace context, approving it
  client.py http MODE URL TOKEN                       over streamable HTTP with a bearer token:
                                                      list, call, approve; then print `listed`
                                                      and wait for a line on stdin, after which a
                                                      plugin changed: wait for the server to say
                                                      so and list again
  client.py ask URL TOKEN                             2026-07-28 over HTTP: call RequestTool and
                                                      print the question and its state
  client.py answer URL TOKEN OTHER_TOKEN STATE        answer that state with the other token,
                                                      then with its own, then again
  client.py pieces MODE URL TOKEN                     the piece `approval` as a tool, called
                                                      without the tasks extension: approved in
                                                      the middle of the call (where the
                                                      revision allows), and from a client that
                                                      cannot be asked
  client.py task-ask URL TOKEN                        2026-07-28 with the tasks extension: call
                                                      the piece, poll the task until it asks,
                                                      print the task
  client.py task-answer URL TOKEN OTHER_TOKEN TASK    get the task with the other token, then
                                                      approve it with tasks/update and poll it
                                                      to its end
  client.py task-wait URL TOKEN TASK                  poll the task to its end
  client.py task-run URL TOKEN                        the SDK's own call_tool with the tasks
                                                      extension's claim: a task approved to
                                                      its end; then one cancelled
  client.py login-in-call URL TOKEN PIECE             2025-11-25: call the piece, whose job
                                                      waits for a browser login; print the
                                                      link the client is sent to, open it
                                                      (accept), and print the call's result
  client.py login-plain URL TOKEN PAGE                2025-11-25: call the tool BrowseWeb on
                                                      PAGE, which needs a login; print the
                                                      link, open it (accept), print the result
  client.py login-rounds URL TOKEN PAGE               the same in 2026-07-28: the link comes as
                                                      `input_required`, the SDK calls again
  client.py task-open URL TOKEN PIECE                 2026-07-28 with the tasks extension: call
                                                      the piece, poll until the task asks,
                                                      open its link (tasks/update accept),
                                                      print the task before and after
The scenarios `pieces` and `task-*` reach the server at URL over streamable HTTP with the bearer
TOKEN, or, where URL is `stdio:` and a JSON list (a command line, like
`stdio:["maestro","mcp","--jobs"]`), over stdio to the process that command starts (TOKEN and
OTHER_TOKEN are then ignored: a stdio client has none).
Prints one JSON document with what the client saw, for the Rust test to check.
"""

import json
import os
import sys
from contextlib import asynccontextmanager
from typing import Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict

SCENARIO = sys.argv[1]
if SCENARIO in ("tour", "gate", "http", "pieces"):
    MODE, ARGS = sys.argv[2], sys.argv[3:]
else:
    MODE, ARGS = "2026-07-28", sys.argv[2:]
if SCENARIO in ("tour", "gate", "rounds", "traced", "traced-piece"):
    MAESTRO, PLUGINS, EXTRA = ARGS[0], ARGS[1], ARGS[2:]
    # `traced*` take the client's traceparent, and hand the server this process's environment,
    # the OTLP endpoint with it (the SDK passes only a few variables of its own choosing).
    ENV = None
    if SCENARIO.startswith("traced"):
        (TRACEPARENT, *EXTRA), ENV = EXTRA, dict(os.environ)
    TARGET = StdioServerParameters(
        command=MAESTRO, args=["mcp", "--plugins", PLUGINS, *EXTRA], env=ENV
    )
APPROVE = {"question": {"action": "accept", "content": {"decision": "approve"}}}
ROTATE = {
    "tool": "RotateKey",
    "reason": "Rotate the staging API key as the user asked.",
    "arguments": {"service": "staging", "revoke_old_after_minutes": 60},
}


class Unknown(types.Request[types.RequestParams | None, Literal["maestro/no-such-method"]]):
    method: Literal["maestro/no-such-method"] = "maestro/no-such-method"
    params: types.RequestParams | None = None


def refusal(error):
    return {"code": error.error.code, "message": error.error.message}


def over_http(url, token):
    headers = {"Authorization": f"Bearer {token}"}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))


@asynccontextmanager
async def connect(where, token, **options):
    """A client of the server at `where`: an HTTP URL, called with the bearer `token`, or
    `stdio:` and the JSON command line of a server to start."""
    if where.startswith("stdio:"):
        command, *args = json.loads(where.removeprefix("stdio:"))
        async with Client(StdioServerParameters(command=command, args=args), **options) as client:
            yield client
    else:
        async with over_http(where, token) as http_client:
            target = streamable_http_client(where, http_client=http_client)
            async with Client(target, **options) as client:
                yield client


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
    async with Client(TARGET, mode=MODE) as client:
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
            seen["unknown_method"] = refusal(error)
        seen["tools_after_unknown"] = len((await client.list_tools()).tools)
        # Not a client that can be asked: the park comes back as a result saying so.
        seen["unasked"] = result(await client.call_tool("RequestTool", ROTATE))

    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with Client(TARGET, mode=MODE, elicitation_callback=approve) as client:
        seen["approved"] = result(await client.call_tool("RequestTool", ROTATE))
        seen["approved_asked"] = asked

    asked, answer = answering(types.ElicitResult(action="accept", content={"answer": "Lisbon"}))
    async with Client(TARGET, mode=MODE, elicitation_callback=answer) as client:
        question = {"status": "needs_user_input", "question": "Which city?"}
        seen["answered"] = result(await client.call_tool("complete", question))
        seen["answered_asked"] = asked

    asked, decline = answering(types.ElicitResult(action="decline"))
    async with Client(TARGET, mode=MODE, elicitation_callback=decline) as client:
        seen["declined"] = result(await client.call_tool("RequestTool", ROTATE))
        seen["declined_asked"] = asked

    return seen


async def traced():
    # The SDK sends `_meta` as given: W3C Trace Context under the keys SEP-414 names.
    parent = {"traceparent": TRACEPARENT, "tracestate": "vendor=value"}
    async with Client(TARGET, mode="legacy") as client:
        child = result(await client.call_tool("echo", {"text": "traced"}, meta=parent))
        alone = result(await client.call_tool("echo", {"text": "untraced"}))
    return {"child": child, "alone": alone}


async def traced_piece():
    parent = {"traceparent": TRACEPARENT}
    _, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with Client(TARGET, mode="legacy", elicitation_callback=approve) as client:
        return {"ran": result(await client.call_tool("approval", PIECE_INPUT, meta=parent))}


async def gate():
    seen = {}
    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with Client(TARGET, mode=MODE, elicitation_callback=approve) as client:
        seen["approved"] = result(await client.call_tool("echo", {"text": "gated"}))
        seen["approved_asked"] = asked
    reply = types.ElicitResult(action="accept", content={"decision": "deny", "reason": "not now"})
    asked, deny = answering(reply)
    async with Client(TARGET, mode=MODE, elicitation_callback=deny) as client:
        seen["denied"] = result(await client.call_tool("echo", {"text": "gated"}))
        seen["denied_asked"] = asked
    return seen


async def http():
    url, token = ARGS
    seen = {}
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with over_http(url, token) as http_client:
        target = streamable_http_client(url, http_client=http_client)
        async with Client(target, mode=MODE, elicitation_callback=approve, message_handler=on_message) as client:
            seen["protocol_version"] = client.protocol_version
            seen["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
            seen["approved"] = result(await client.call_tool("RequestTool", ROTATE))
            seen["approved_asked"] = asked
            if MODE == "legacy":
                print("listed", flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
                with anyio.fail_after(60):
                    await changed.wait()
            else:
                # 2026-07-28 has no session: changes come on a `subscriptions/listen` stream.
                async with client.listen(tools_list_changed=True) as changes:
                    print("listed", flush=True)
                    await anyio.to_thread.run_sync(sys.stdin.readline)
                    with anyio.fail_after(60):
                        await changes.__anext__()
            tools = await client.list_tools(cache_mode="refresh")
            seen["tools_after_change"] = sorted(t.name for t in tools.tools)
            seen["echo"] = result(await client.call_tool("echo", {"text": "hot loaded"}))
    return seen


async def rounds():
    """2026-07-28 driven by hand: what the server does with states sent back wrongly."""
    seen = {}
    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with Client(TARGET, mode=MODE, elicitation_callback=approve) as client:
        session = client.session
        seen["protocol_version"] = client.protocol_version
        first = await session.call_tool("RequestTool", ROTATE, allow_input_required=True)
        seen["questions"] = sorted((first.input_requests or {}).keys())
        seen["message"] = first.input_requests["question"].params.message
        state = first.request_state

        async def answer(state, arguments=ROTATE, responses=APPROVE):
            try:
                r = await session.call_tool(
                    "RequestTool", arguments, input_responses=responses, request_state=state,
                    allow_input_required=True,
                )
                return result(r)
            except MCPError as error:
                return refusal(error)

        seen["answered"] = await answer(state)
        seen["answered_again"] = await answer(state)
        second = (await session.call_tool("RequestTool", ROTATE, allow_input_required=True)).request_state
        flipped = "A" if second[len(second) // 2] != "A" else "B"
        altered = second[: len(second) // 2] + flipped + second[len(second) // 2 + 1 :]
        seen["altered"] = await answer(altered)
        other = dict(ROTATE, arguments={"service": "production", "revoke_old_after_minutes": 0})
        seen["other_arguments"] = await answer(second, arguments=other)
        seen["no_answer"] = await answer(second, responses={})
        # None of those spent it: its own answer still goes through.
        seen["second_answered"] = await answer(second)
    return seen


async def ask():
    url, token = ARGS
    async with over_http(url, token) as http_client:
        target = streamable_http_client(url, http_client=http_client)
        _, never = answering(None)  # declares forms; the questions are answered by hand
        async with Client(target, mode=MODE, elicitation_callback=never) as client:
            first = await client.session.call_tool("RequestTool", ROTATE, allow_input_required=True)
            return {
                "protocol_version": client.protocol_version,
                "message": first.input_requests["question"].params.message,
                "state": first.request_state,
            }


async def answer():
    url, token, other_token, state = ARGS
    seen = {}
    for name, bearer in (("other_caller", other_token), ("answered", token), ("answered_again", token)):
        async with over_http(url, bearer) as http_client:
            target = streamable_http_client(url, http_client=http_client)
            _, never = answering(None)
            async with Client(target, mode=MODE, elicitation_callback=never) as client:
                try:
                    r = await client.session.call_tool(
                        "RequestTool", ROTATE, input_responses=APPROVE, request_state=state,
                        allow_input_required=True,
                    )
                    seen[name] = result(r)
                except MCPError as error:
                    seen[name] = refusal(error)
    return seen


# The tasks extension (io.modelcontextprotocol/tasks), which the SDK leaves to a ClientExtension:
# the `task` result a call may return, and the requests that poll, answer and cancel a task.
TASKS = "io.modelcontextprotocol/tasks"
PIECE_INPUT = {"input": "Rotate the API key of the staging service."}


class TaskHandle(types.Result):
    """A call's `resultType: "task"`: the server made a task of it."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskState(types.Result):
    """What `tasks/get` says of a task."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    input_requests: dict | None = None
    result: dict | None = None
    error: dict | None = None
    poll_interval_ms: int | None = None


class TaskParams(types.RequestParams):
    task_id: str


class UpdateParams(TaskParams):
    input_responses: dict


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def get_task(session, task_id):
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), TaskState)


async def update_task(session, task_id, responses):
    params = UpdateParams(task_id=task_id, input_responses=responses)
    await session.send_request(UpdateTask(params=params), types.Result)


async def poll(session, task_id, until):
    """Gets the task until `until(state)` holds; the last state."""
    with anyio.fail_after(120):
        while True:
            state = await get_task(session, task_id)
            if until(state):
                return state
            await anyio.sleep((state.poll_interval_ms or 500) / 1000)


def ended(state):
    return state.status in ("completed", "failed", "cancelled")


def asks_or_ended(state):
    return state.status == "input_required" or ended(state)


def shown(state):
    return state.model_dump(by_alias=True, exclude_none=True)


class Tasks(ClientExtension):
    """Declares the tasks extension and finishes a task the way a client would: it polls, asks
    the person each question the task holds (`answer`) and sends their replies."""

    identifier = TASKS

    def __init__(self, answer):
        self.answer = answer

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle, ctx):
        while True:
            state = await poll(ctx.session, handle.task_id, asks_or_ended)
            if state.status == "completed":
                return types.CallToolResult.model_validate(state.result)
            if ended(state):
                return types.CallToolResult(
                    is_error=True, content=[types.TextContent(type="text", text=state.status_message or state.status)]
                )
            responses = {key: await self.answer(request) for key, request in state.input_requests.items()}
            await update_task(ctx.session, handle.task_id, responses)


def tasks_client(where, token, answer=None):
    async def never(request):
        raise AssertionError(f"asked unexpectedly: {request}")

    return connect(where, token, mode="auto", extensions=[Tasks(answer or never)])


def approving(asked):
    async def answer(request):
        asked.append(request["params"]["message"])
        return {"action": "accept", "content": {"decision": "approve"}}

    return answer


async def pieces():
    url, token = ARGS
    seen = {}
    asked, approve = answering(types.ElicitResult(action="accept", content={"decision": "approve"}))
    async with connect(url, token, mode=MODE, elicitation_callback=approve) as client:
        seen["protocol_version"] = client.protocol_version
        tools = {t.name: t for t in (await client.list_tools()).tools}
        seen["tools"] = sorted(tools)
        seen["piece"] = {"description": tools["approval"].description, "schema": tools["approval"].input_schema}
        seen["asked_in_call"] = result(await client.call_tool("approval", PIECE_INPUT))
        seen["asked_in_call_asked"] = asked
        try:
            await client.call_tool("approval", {"text": "no input"})
        except MCPError as error:
            seen["bad_arguments"] = refusal(error)
    async with connect(url, token, mode=MODE) as client:
        seen["unasked"] = result(await client.call_tool("approval", PIECE_INPUT))
    return seen


async def task_ask():
    url, token = ARGS
    async with tasks_client(url, token) as client:
        handle = await client.session.call_tool("approval", PIECE_INPUT, allow_claimed=True)
        state = await poll(client.session, handle.task_id, asks_or_ended)
        return {"protocol_version": client.protocol_version, "handle": shown(handle), "asked": shown(state)}


async def task_answer():
    url, token, other_token, task_id = ARGS
    seen = {}
    if not url.startswith("stdio:"):
        async with tasks_client(url, other_token) as client:
            try:
                seen["other_caller"] = shown(await get_task(client.session, task_id))
            except MCPError as error:
                seen["other_caller"] = refusal(error)
    async with tasks_client(url, token) as client:
        before = await get_task(client.session, task_id)
        seen["before"] = shown(before)
        try:
            await update_task(client.session, task_id, {"wait-999": {"action": "accept"}})
        except MCPError as error:
            seen["wrong_key"] = refusal(error)
        (key,) = before.input_requests.keys()
        try:
            await update_task(client.session, task_id, {key: {"action": "accept", "content": {}}})
        except MCPError as error:
            seen["no_decision"] = refusal(error)
        await update_task(client.session, task_id, {key: {"action": "accept", "content": {"decision": "approve"}}})
        seen["after"] = shown(await poll(client.session, task_id, ended))
    return seen


async def task_wait():
    url, token, task_id = ARGS
    async with tasks_client(url, token) as client:
        return shown(await poll(client.session, task_id, ended))


async def task_run():
    url, token = ARGS
    seen = {}
    asked = []
    async with tasks_client(url, token, approving(asked)) as client:
        seen["ran"] = result(await client.call_tool("approval", PIECE_INPUT))
        seen["asked"] = asked
        handle = await client.session.call_tool("approval", PIECE_INPUT, allow_claimed=True)
        await poll(client.session, handle.task_id, asks_or_ended)
        await client.session.send_request(CancelTask(params=TaskParams(task_id=handle.task_id)), types.Result)
        seen["cancelled"] = shown(await poll(client.session, handle.task_id, ended))
    return seen


async def open_links_and_call(tool, arguments, mode="legacy"):
    """Call `tool` (in 2025-11-25, or in `mode`); print each link it sends the person to and
    open it (accept); then the call's result and the links whose step the server said was
    done (a notification that only 2025-11-25 has)."""
    url, token = ARGS[0], ARGS[1]
    links = []
    completed = []
    heard_all = []
    heard = anyio.Event()

    async def open_link(context, params):
        links.append({"mode": params.mode, "message": params.message, "url": getattr(params, "url", None),
                      "elicitation_id": getattr(params, "elicitation_id", None)})
        # The person opens the page: the test logs in there.
        print(json.dumps(links[-1]), flush=True)
        return types.ElicitResult(action="accept")

    async def on_message(message):
        # Everything the server sent besides the call's result, for the test to look through.
        heard_all.append(repr(message))
        if isinstance(message, types.ElicitCompleteNotification):
            completed.append(message.params.elicitation_id)
            heard.set()

    async with over_http(url, token) as http_client:
        target = streamable_http_client(url, http_client=http_client)
        async with Client(target, mode=mode, elicitation_callback=open_link, message_handler=on_message) as client:
            done = result(await client.call_tool(tool, arguments))
            # Over HTTP the notification comes on the session's own stream, not the call's.
            if mode == "legacy":
                with anyio.move_on_after(30):
                    await heard.wait()
            return {"protocol_version": client.protocol_version, "links": links, "result": done,
                    "completed": completed, "messages": heard_all}


async def login_in_call():
    return await open_links_and_call(ARGS[2], PIECE_INPUT)


async def login_plain():
    return await open_links_and_call("BrowseWeb", {"url": ARGS[2]})


async def login_rounds():
    return await open_links_and_call("BrowseWeb", {"url": ARGS[2]}, mode="auto")


async def task_open():
    url, token, piece = ARGS
    async with tasks_client(url, token) as client:
        handle = await client.session.call_tool(piece, PIECE_INPUT, allow_claimed=True)
        asked = await poll(client.session, handle.task_id, asks_or_ended)
        (key,) = asked.input_requests.keys()
        await update_task(client.session, handle.task_id, {key: {"action": "accept"}})
        after = await get_task(client.session, handle.task_id)
        return {"handle": shown(handle), "asked": shown(asked), "after": shown(after)}


async def main():
    scenarios = {
        "tour": tour, "gate": gate, "http": http, "rounds": rounds, "ask": ask, "answer": answer,
        "pieces": pieces, "task-ask": task_ask, "task-answer": task_answer, "task-wait": task_wait,
        "task-run": task_run, "login-in-call": login_in_call, "login-plain": login_plain, "login-rounds": login_rounds, "task-open": task_open,
        "traced": traced, "traced-piece": traced_piece,
    }
    print(json.dumps(await scenarios[SCENARIO]()))


anyio.run(main)
