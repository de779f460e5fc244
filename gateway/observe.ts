/**
 * Wrapping the request handler to watch its answers (the access log, metrics, the server span): one shape for all
 * of them, so that each sees the same status whether the handler answered at once, later, or threw.
 */
import type { HttpHandler, HttpRequest, HttpResult, HttpStream } from "./http.ts";

/**
 * What a watcher does with one request: `watch` runs before the handler and returns what to do once the answer (or
 * a stream's head) is ready; `answer` is undefined when the handler threw, which the adapter answers with a 500.
 * The function may return a replacement answer (a stream wrapped to see its end).
 */
export type Watch = (req: HttpRequest) => (answer: HttpResult | HttpStream | undefined) => HttpResult | HttpStream | void;

export function watched(handler: HttpHandler, watch: Watch): HttpHandler {
  return (req) => handleWatched(handler, req, watch(req));
}

/** Run `handler` on `req` and tell `answered` its answer (or undefined, when it threw); see Watch. */
export function handleWatched(handler: HttpHandler, req: HttpRequest, answered: ReturnType<Watch>): ReturnType<HttpHandler> {
  const pass = (answer: HttpResult | HttpStream) => answered(answer) ?? answer;
  let answer: ReturnType<HttpHandler>;
  try {
    answer = handler(req);
  } catch (err) {
    answered(undefined);
    throw err;
  }
  if (!(answer instanceof Promise)) return pass(answer);
  return answer.then(pass, (err: unknown) => {
    answered(undefined);
    throw err;
  });
}

/** The status a watcher reports: a thrown handler is answered 500 by the adapter. */
export const statusOf = (answer: HttpResult | HttpStream | undefined): number => answer?.status ?? 500;
