"""Times `tools/call` round trips over stdio with the official MCP Python SDK, for
benches/mcp_stdio.rs: it starts the server command it is given, calls `echo` WARMUP times, then
CALLS times one after the other, and prints each timed round trip in nanoseconds (one JSON list).

Usage: mcp_client.py MODE WARMUP CALLS COMMAND [ARGS...]   (MODE: `legacy` or `auto`, as Client)
"""

import json
import os
import sys
import time

import anyio
from mcp import Client, StdioServerParameters

MODE, WARMUP, CALLS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SERVER = StdioServerParameters(command=sys.argv[4], args=sys.argv[5:], env=dict(os.environ))
ARGUMENTS = {"text": "hello, sandbox"}


async def main():
    async with Client(SERVER, mode=MODE) as client:
        for _ in range(WARMUP):
            await client.call_tool("echo", ARGUMENTS)
        times = []
        for _ in range(CALLS):
            start = time.perf_counter_ns()
            result = await client.call_tool("echo", ARGUMENTS)
            times.append(time.perf_counter_ns() - start)
            assert not result.is_error and result.content[0].text == ARGUMENTS["text"], result
        print(json.dumps({"protocol_version": client.protocol_version, "times": times}))


anyio.run(main)
