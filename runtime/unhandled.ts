/**
 * What a process does with a promise rejection that nothing handled: it logs it as an error with its stack, counts
 * it (`chorus_unhandled_rejections_total`), and goes on.
 *
 * Node's default ends the process, and with one worker (`npm start`'s default) nothing starts it again. Every state
 * that matters is committed in the store before a request is answered, so a forgotten rejection costs the work it
 * belonged to, not the server and every connection on it. An exception thrown out of a callback (`uncaughtException`)
 * still ends the process, as Node's default: it may have left a structure half-changed.
 */
import { log } from "./log.ts";
import { metrics } from "./metrics.ts";

let installed = false;

export function keepRunningOnUnhandledRejections(): void {
  if (installed) return;
  installed = true;
  process.on("unhandledRejection", (reason) => {
    metrics().unhandledRejections.inc();
    log.error({ err: reason }, "a promise rejection nothing handled (a bug in Chorus: please report it); the process goes on");
  });
}
