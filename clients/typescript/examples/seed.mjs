import { ExecutionOutcome, M3Client } from "@m3grpc/client";

const m3 = new M3Client(process.argv[2] ?? "127.0.0.1:50051");
const { executionId } = await m3.submit({ server: "shipping", tools: ["shipping:book_shipment"], humanInput: "managed" });
for await (const event of m3.watchPending({ executionId })) { // the stream ends when the execution finishes
  if (event.kind !== "round_pending") continue;
  const content = { street: "1 Main Street", city: "Pune" };
  await m3.respond({ roundId: event.round.roundId, idempotencyKey: `address-${event.round.roundId}`,
                     responses: { shipping_address: { action: "accept", content } } });
}
const result = await m3.result(executionId, { timeoutSeconds: 120 });
console.log(ExecutionOutcome[result.outcome], result.operations[0]?.result?.content);
m3.close();
