/**
 * A lease test's worker (lease-worker.ts) as a process of its own, `fork`ed by the test with tsx and its options as
 * JSON in argv[2]. A message `{ stall: ms }` busy-waits its event loop that long (its renewer thread runs on, as
 * through a long GC or a busy turn), then it answers `{ stalled: ms }`.
 */
import { startLeaseWorker, type FromLeaseWorker, type LeaseWorkerOptions, type ToLeaseWorker } from "./lease-worker.ts";

function busyWait(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until);
}

const send = (message: FromLeaseWorker) => process.send!(message);
const worker = await startLeaseWorker(JSON.parse(process.argv[2]!) as LeaseWorkerOptions);
process.on("message", async (message: ToLeaseWorker) => {
  if ("stall" in message) {
    busyWait(message.stall);
    send({ stalled: message.stall });
  } else {
    await worker.stop();
    send({ stopped: true });
    process.disconnect();
  }
});
send({ started: true });
