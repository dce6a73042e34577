// Drives maestro's MCP server with the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`,
// a client of revision 2025-11-25), as a second client nobody here wrote: it lists the tools,
// calls one, calls tools that park and answers (or declines) their questions through form
// elicitation in the middle of the call, calls from a client that cannot be asked, and probes
// an unknown method.
//
// Usage:
//   client.mjs tour MAESTRO_BINARY PLUGIN_DIR          the above, over stdio
//   client.mjs gate MAESTRO_BINARY PLUGIN_DIR ARGS     echo under the operator's approval gate
//                                                      (which ARGS for maestro set): approved,
//                                                      then denied
//   client.mjs http URL TOKEN                          over streamable HTTP with a bearer token:
//                                                      the tools, a tool request approved, the
//                                                      piece `approval` approved in the call,
//                                                      a tool request declined, and the piece
//                                                      called by a client that cannot be asked
// Prints one JSON document with what the client saw (the shape client.py prints), for the Rust
// test to check.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, McpError, ResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [scenario, ...args] = process.argv.slice(2);

const ROTATE = {
  tool: "RotateKey",
  reason: "Rotate the staging API key as the user asked.",
  arguments: { service: "staging", revoke_old_after_minutes: 60 },
};
const PIECE_INPUT = { input: "Rotate the API key of the staging service." };
const APPROVE = { action: "accept", content: { decision: "approve" } };
// A piece's job may take a while between its question and its end.
const CALL_OPTIONS = { timeout: 120_000 };

/// How the client reaches the server: `maestro mcp` as a subprocess, or `/mcp` with a token.
function stdio(extra = []) {
  const [maestro, plugins] = args;
  // The SDK passes a subprocess only a few variables unless told otherwise; maestro's compile
  // cache comes from the test's environment.
  return () =>
    new StdioClientTransport({
      command: maestro,
      args: ["mcp", "--plugins", plugins, ...extra],
      env: process.env,
      stderr: "inherit",
    });
}

function http(url, token) {
  return () =>
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
}

/// Connects a client that answers every form with `reply` (none: a client without
/// elicitation), runs `use` with it, and records the revision and what it was asked.
async function session(transport, reply, use) {
  const client = new Client(
    { name: "maestro-test-typescript", version: "0.1.0" },
    { capabilities: reply ? { elicitation: { form: {} } } : {} },
  );
  const asked = [];
  if (reply) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push({ message: request.params.message, schema: request.params.requestedSchema });
      return reply;
    });
  }
  const connection = transport();
  let revision = null;
  // The SDK tells a transport the negotiated revision; stdio's has no use for it.
  const told = connection.setProtocolVersion?.bind(connection);
  connection.setProtocolVersion = (version) => {
    revision = version;
    told?.(version);
  };
  await client.connect(connection);
  try {
    return await use(client, asked, revision);
  } finally {
    await client.close();
  }
}

function result(r) {
  const text = r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  return { is_error: Boolean(r.isError), text };
}

function refusal(error) {
  if (!(error instanceof McpError)) throw error;
  return { code: error.code, message: error.message };
}

async function call(client, name, input) {
  return result(await client.callTool({ name, arguments: input }, undefined, CALL_OPTIONS));
}

async function tour() {
  const seen = {};
  const transport = stdio();
  await session(transport, null, async (client, _, revision) => {
    seen.protocol_version = revision;
    const { tools } = await client.listTools();
    seen.tools = Object.fromEntries(
      tools.map((t) => [t.name, { description: t.description, schema: t.inputSchema }]),
    );
    seen.echo = await call(client, "echo", { text: "hello, sandbox" });
    seen.invalid = await call(client, "echo", { text: 7 });
    // A method the server does not know is an error, and the connection goes on.
    try {
      await client.request({ method: "maestro/no-such-method" }, ResultSchema);
      seen.unknown_method = "answered";
    } catch (error) {
      seen.unknown_method = refusal(error);
    }
    seen.tools_after_unknown = (await client.listTools()).tools.length;
    // Not a client that can be asked: the park comes back as a result saying so.
    seen.unasked = await call(client, "RequestTool", ROTATE);
  });
  await session(transport, APPROVE, async (client, asked) => {
    seen.approved = await call(client, "RequestTool", ROTATE);
    seen.approved_asked = asked;
  });
  const lisbon = { action: "accept", content: { answer: "Lisbon" } };
  await session(transport, lisbon, async (client, asked) => {
    const question = { status: "needs_user_input", question: "Which city?" };
    seen.answered = await call(client, "complete", question);
    seen.answered_asked = asked;
  });
  await session(transport, { action: "decline" }, async (client, asked) => {
    seen.declined = await call(client, "RequestTool", ROTATE);
    seen.declined_asked = asked;
  });
  return seen;
}

async function gate() {
  const seen = {};
  const transport = stdio(args.slice(2));
  await session(transport, APPROVE, async (client, asked) => {
    seen.approved = await call(client, "echo", { text: "gated" });
    seen.approved_asked = asked;
  });
  const deny = { action: "accept", content: { decision: "deny", reason: "not now" } };
  await session(transport, deny, async (client, asked) => {
    seen.denied = await call(client, "echo", { text: "gated" });
    seen.denied_asked = asked;
  });
  return seen;
}

async function overHttp() {
  const [url, token] = args;
  const transport = http(url, token);
  const seen = {};
  await session(transport, APPROVE, async (client, asked, revision) => {
    seen.protocol_version = revision;
    const { tools } = await client.listTools();
    seen.tools = tools.map((t) => t.name).sort();
    const piece = tools.find((t) => t.name === "approval");
    seen.piece = piece && { description: piece.description, schema: piece.inputSchema };
    seen.approved = await call(client, "RequestTool", ROTATE);
    seen.approved_asked = asked.splice(0);
    seen.asked_in_call = await call(client, "approval", PIECE_INPUT);
    seen.asked_in_call_asked = asked.splice(0);
    try {
      await client.callTool({ name: "approval", arguments: { text: "no input" } });
    } catch (error) {
      seen.bad_arguments = refusal(error);
    }
  });
  await session(transport, { action: "decline" }, async (client, asked) => {
    seen.declined = await call(client, "RequestTool", ROTATE);
    seen.declined_asked = asked;
  });
  await session(transport, null, async (client) => {
    seen.unasked = await call(client, "approval", PIECE_INPUT);
  });
  return seen;
}

const scenarios = { tour, gate, http: overHttp };
if (!scenarios[scenario]) {
  console.error(`unknown scenario ${scenario}: one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
console.log(JSON.stringify(await scenarios[scenario]()));
