/**
 * Routing shared by both faces (Zulip's /api/v1 and the assistant's): method + path templates with `{name}`
 * segments, static paths looked up directly, 405 detection, and the request span with its error mapping.
 */
import { context, trace, SpanStatusCode } from "@opentelemetry/api";
import { ChorusError } from "../runtime/errors.ts";
import type { HttpRequest, HttpResult, HttpStream } from "./http.ts";

const tracer = trace.getTracer("chorus.gateway");

export interface Routable {
  method: string;
  path: string;
}

export interface Match<R> {
  route?: R;
  pathParams: Record<string, string>;
  /** Methods of routes whose path matched when none had this method (for 405). */
  allowed: string[];
}

export class Router<R extends Routable> {
  private readonly templated: Array<{ route: R; segments: string[] }> = [];
  private readonly byPath = new Map<string, R[]>();

  add(route: R): void {
    if (route.path.includes("{")) this.templated.push({ route, segments: route.path.split("/").slice(1) });
    else this.byPath.set(route.path, [...(this.byPath.get(route.path) ?? []), route]);
  }

  match(method: string, path: string): Match<R> {
    const allowed: string[] = [];
    for (const route of this.byPath.get(path) ?? []) {
      if (route.method === method) return { route, pathParams: {}, allowed };
      allowed.push(route.method);
    }
    const parts = path.split("/").slice(1);
    for (const { route, segments } of this.templated) {
      if (segments.length !== parts.length) continue;
      const pathParams: Record<string, string> = {};
      const ok = segments.every((seg, i) => {
        if (!seg.startsWith("{")) return seg === parts[i];
        const value = decodeSegment(parts[i]!);
        if (!value) return false; // empty, or malformed percent-encoding: no route matches
        pathParams[seg.slice(1, -1)] = value;
        return true;
      });
      if (!ok) continue;
      if (route.method === method) return { route, pathParams, allowed };
      allowed.push(route.method);
    }
    return { pathParams: {}, allowed };
  }
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return "";
  }
}

/**
 * Run a request inside its span; a thrown error becomes `toResult(error)` (each face has its own envelope), and
 * unexpected failures are logged without reaching the client.
 */
export async function traced(
  req: HttpRequest,
  run: () => Promise<HttpResult | HttpStream>,
  toResult: (error: ChorusError) => HttpResult,
): Promise<HttpResult | HttpStream> {
  const span = tracer.startSpan(`${req.method} ${req.path}`);
  try {
    return await context.with(trace.setSpan(context.active(), span), run);
  } catch (err) {
    const error = ChorusError.wrap(err);
    if (error.status >= 500) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.code });
      if (error.code === "INTERNAL_SERVER_ERROR") console.error(`${req.method} ${req.path} failed`, error.cause ?? error);
    }
    return toResult(error);
  } finally {
    span.end();
  }
}
