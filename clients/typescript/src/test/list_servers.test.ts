/**
 * M3Client.listServers over a real gRPC round trip (an in-process connect-node
 * server on loopback answering like the service): the request it builds, the
 * servers it returns, and SERVER_BINDING_NOT_FOUND as the typed error.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  ERROR_DOMAIN,
  ExecutionService,
  M3Client,
  ServerBindingNotFoundError,
  ServerTransport,
} from "../index.js";
import type { ListServersRequest } from "../index.js";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";

test("listServers sends names and includeTools and returns the servers", async () => {
  const seen: ListServersRequest[] = [];
  const server = http2.createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(ExecutionService, {
          listServers(request) {
            seen.push(request);
            const unknown = request.names.find((name) => name !== "shipping");
            if (unknown !== undefined) {
              throw new ConnectError(`no server binding named '${unknown}'; configured: shipping`, Code.NotFound, undefined, [
                {
                  desc: ErrorInfoSchema,
                  value: {
                    reason: "SERVER_BINDING_NOT_FOUND",
                    domain: ERROR_DOMAIN,
                    metadata: { server: unknown, known_servers: "shipping" },
                  },
                },
              ]);
            }
            return {
              servers: [
                {
                  name: "shipping",
                  transport: ServerTransport.STDIO,
                  tools: request.includeTools ? [{ name: "book_shipment", description: "Book a shipment." }] : [],
                },
              ],
            };
          },
        }),
    }),
  );
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  const { port } = server.address() as AddressInfo;
  const client = new M3Client(`127.0.0.1:${port}`);
  try {
    const servers = await client.listServers({ names: ["shipping"], includeTools: true });
    assert.deepEqual(
      servers.map((s) => [s.name, s.transport, s.tools.map((t) => t.name)]),
      [["shipping", ServerTransport.STDIO, ["book_shipment"]]],
    );
    assert.deepEqual(seen[0]?.names, ["shipping"]);
    assert.equal(seen[0]?.includeTools, true);
    const plain = await client.listServers();
    assert.equal(plain[0]?.tools.length, 0);
    await assert.rejects(client.listServers({ names: ["shiping"] }), (error: unknown) => {
      assert.ok(error instanceof ServerBindingNotFoundError);
      assert.equal(error.metadata["known_servers"], "shipping");
      return true;
    });
  } finally {
    client.close();
    await new Promise<void>((closed) => server.close(() => closed()));
  }
});
