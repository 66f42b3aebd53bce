// Test MCP server "tasks" (Node.js, the TypeScript SDK installed in tests/node):
// a 2025-11-25 server whose tools `slow-task` and `slow-created-task` are
// task-only (`execution.taskSupport: required`) and never finish on their own,
// so a client can only end them with `tasks/cancel`.
//
// Every task it creates and every task cancelled is appended to the file named
// by M3_TASK_LOG, one line each: `created <taskId>` / `cancelled <taskId>`, so a
// test can see that the client sent `tasks/cancel` after its session is gone.
//
// Run `node tests/mcp_servers/task_server.mjs` (stdio) or with `--http --port N`
// (Streamable HTTP at http://127.0.0.1:N/mcp).
import { appendFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";

const sdk = (path) =>
  import(new URL(`../node/node_modules/@modelcontextprotocol/sdk/dist/esm/${path}`, import.meta.url).href);
const { McpServer } = await sdk("server/mcp.js");
const { StdioServerTransport } = await sdk("server/stdio.js");
const { StreamableHTTPServerTransport } = await sdk("server/streamableHttp.js");
const { InMemoryTaskStore, InMemoryTaskMessageQueue } = await sdk("experimental/tasks/index.js");

const log = (line) => {
  if (process.env.M3_TASK_LOG) appendFileSync(process.env.M3_TASK_LOG, `${line}\n`);
};

class LoggingTaskStore extends InMemoryTaskStore {
  async updateTaskStatus(taskId, status, statusMessage, sessionId) {
    await super.updateTaskStatus(taskId, status, statusMessage, sessionId);
    if (status === "cancelled") log(`cancelled ${taskId}`);
  }
}

function build() {
  const server = new McpServer(
    { name: "tasks", version: "1.0.0" },
    {
      capabilities: {
        tools: {},
        tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
      },
      taskStore: new LoggingTaskStore(),
      taskMessageQueue: new InMemoryTaskMessageQueue(),
    },
  );
  // `slow-task` answers the tools/call at once; `slow-created-task` holds its
  // CreateTaskResult back for a second after the task exists (a client cancelled
  // meanwhile must still cancel the task it learns of).
  for (const [name, createDelayMs] of [["slow-task", 0], ["slow-created-task", 1000]]) {
    server.experimental.tasks.registerToolTask(
      name,
      { description: "A task that runs until cancelled.", inputSchema: {}, execution: { taskSupport: "required" } },
      {
        createTask: async (_args, extra) => {
          const task = await extra.taskStore.createTask({ ttl: 300000, pollInterval: 100 });
          log(`created ${task.taskId}`);
          await new Promise((resolve) => setTimeout(resolve, createDelayMs));
          return { task };
        },
        getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
        getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId),
      },
    );
  }
  return server;
}

const portIndex = process.argv.indexOf("--port");
if (!process.argv.includes("--http")) {
  await build().connect(new StdioServerTransport());
} else {
  const transports = new Map();
  createServer(async (req, res) => {
    if (!req.url.startsWith("/mcp")) {
      res.writeHead(404).end();
      return;
    }
    const sessionId = req.headers["mcp-session-id"];
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport) {
      if (sessionId || req.method !== "POST") {
        res.writeHead(sessionId ? 404 : 400).end();
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transports.delete(transport.sessionId);
      await build().connect(transport);
    }
    await transport.handleRequest(req, res);
  }).listen(Number(process.argv[portIndex + 1]), "127.0.0.1");
}
