/**
 * The console's calls to the internal API: the session cookie goes with every call (same origin), and every call
 * that changes something carries the session's CSRF token. A failure throws an ApiError whose message is the
 * server's sentence (the assistant's `{"error": {"code", "message"}}`), or one for a lost connection.
 */

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
  }
}

let csrfToken = "";

export function setCsrfToken(token: string): void {
  csrfToken = token;
}

type Body = Record<string, unknown> | FormData | undefined;

export async function request<T = any>(method: string, path: string, body?: Body): Promise<T> {
  const headers: Record<string, string> = {};
  if (method !== "GET") headers["x-csrf-token"] = csrfToken;
  let payload: BodyInit | undefined;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers["content-type"] = "application/json";
    payload = JSON.stringify(body);
  }
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: payload, credentials: "same-origin" });
  } catch {
    throw new ApiError("Could not reach the server. Check your connection and try again.", 0, "NETWORK");
  }
  const parsed = (await res.json().catch(() => undefined)) as any;
  if (res.ok) return parsed as T;
  const message: string = parsed?.error?.message ?? `The server could not do this (HTTP ${res.status}).`;
  throw new ApiError(/[.!?]$/.test(message) ? message : `${message}.`, res.status, parsed?.error?.code ?? "HTTP");
}

export const get = <T = any>(path: string) => request<T>("GET", path);
export const post = <T = any>(path: string, body: Body = {}) => request<T>("POST", path, body);
export const patch = <T = any>(path: string, body: Body) => request<T>("PATCH", path, body);

export interface AgentInfo {
  agent_id: string;
  name: string;
  agent_key: string;
  allowed_origins: string[];
  rate_limit_per_minute: number;
  published_version_id: string | null;
  published_at: string | null;
  created_at: string;
  versions?: number;
  publish_history?: string[];
}

export interface Source {
  title: string;
  url?: string;
}
