// Test MCP server "booking" (Node.js), written the way the MCP TypeScript SDK's documentation
// writes one: McpServer.registerTool, and `server.server.elicitInput` with a schema made by
// zod (`z.toJSONSchema`: `$schema`, `additionalProperties: false`, and the object's
// `.describe()` as the top-level `description`). Nothing M3-specific: the request has no
// title, so M3's request key is "input".
//
// Tool `book_table` asks for a name (string), seating ("indoor"/"outdoor"), high_chair
// (boolean, default false), guests (integer 1-12) and an optional note. Accept -> "booked a
// table for 4 (outdoor, high chair) under Ada; note: window"; decline/cancel -> "no booking:
// declined|cancelled".
//
// Run `node tests/mcp_servers/booking.mjs` (stdio; the SDK installed in tests/node).
const sdk = (path) =>
  import(new URL(`../node/node_modules/@modelcontextprotocol/sdk/dist/esm/${path}`, import.meta.url).href);
const { McpServer } = await sdk("server/mcp.js");
const { StdioServerTransport } = await sdk("server/stdio.js");
const { z } = await import(new URL("../node/node_modules/zod/index.js", import.meta.url).href);

const Booking = z
  .object({
    name: z.string().describe("Name for the booking"),
    seating: z.enum(["indoor", "outdoor"]),
    high_chair: z.boolean().default(false),
    guests: z.number().int().min(1).max(12),
    note: z.string().optional(),
  })
  .describe("The table to book");

const words = { decline: "declined", cancel: "cancelled" };
const server = new McpServer({ name: "booking", version: "1.0.0" });

server.registerTool(
  "book_table",
  { description: "Book a table after asking for the details." },
  async () => {
    const result = await server.server.elicitInput({
      message: "How should the table be booked?",
      requestedSchema: z.toJSONSchema(Booking),
    });
    if (result.action !== "accept") {
      return { content: [{ type: "text", text: `no booking: ${words[result.action]}` }] };
    }
    const booking = Booking.parse(result.content);
    const chair = booking.high_chair ? ", high chair" : "";
    const text =
      `booked a table for ${booking.guests} (${booking.seating}${chair}) ` +
      `under ${booking.name}; note: ${booking.note ?? "-"}`;
    return { content: [{ type: "text", text }] };
  },
);

await server.connect(new StdioServerTransport());
