/**
 * M3ClientOptions.interceptors over a real gRPC round trip (an in-process
 * connect-node server on loopback): a header an interceptor sets, as a trace
 * context propagator would set `traceparent`, reaches the service.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import type { Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ExecutionService, M3Client } from "../index.js";

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

test("interceptors add headers to every call", async () => {
  const seen: (string | null)[] = [];
  const server = http2.createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(ExecutionService, {
          listServers(_request, context) {
            seen.push(context.requestHeader.get("traceparent"));
            return { servers: [] };
          },
        }),
    }),
  );
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  const { port } = server.address() as AddressInfo;
  const traceContext: Interceptor = (next) => async (request) => {
    request.header.set("traceparent", TRACEPARENT);
    return await next(request);
  };
  const traced = new M3Client(`127.0.0.1:${port}`, { interceptors: [traceContext] });
  const plain = new M3Client(`127.0.0.1:${port}`);
  try {
    assert.deepEqual(await traced.listServers(), []);
    assert.deepEqual(await plain.listServers(), []);
    assert.deepEqual(seen, [TRACEPARENT, null]);
  } finally {
    traced.close();
    plain.close();
    await new Promise<void>((closed) => server.close(() => closed()));
  }
});
