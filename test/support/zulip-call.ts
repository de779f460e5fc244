/**
 * A call to a Chorus node's /api/v1 as a Zulip client makes it, with nothing checked: light enough for a client
 * process of its own (test/support/host-clients.ts). `api` (server.ts) adds the check against Zulip's OpenAPI
 * description.
 */

export interface Credentials {
  email: string;
  key: string;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  body: any;
}

export interface RawCallOptions {
  as?: Credentials | null;
  /** Parameters: sent in the query string for GET and DELETE, as a form body otherwise. Objects become JSON. */
  params?: Record<string, unknown>;
  multipart?: boolean;
  /** Files to send as parts of a multipart body (which `files` implies). */
  files?: Array<{ filename: string; type: string; data: Uint8Array }>;
  signal?: AbortSignal;
  /** Extra request headers (a client's User-Agent). */
  headers?: Record<string, string>;
}

function encode(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** The call; throws if the answer is not JSON. */
export async function callZulip(server: { url: string }, method: string, apiPath: string, opts: RawCallOptions = {}): Promise<ApiResponse> {
  const url = new URL(`/api/v1${apiPath}`, server.url);
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.as) headers.authorization = `Basic ${Buffer.from(`${opts.as.email}:${opts.as.key}`).toString("base64")}`;
  let body: string | FormData | undefined;
  const entries = Object.entries(opts.params ?? {}).filter(([, v]) => v !== undefined);
  if (method === "GET" || method === "DELETE") {
    for (const [k, v] of entries) url.searchParams.set(k, encode(v));
  } else if (opts.multipart || opts.files) {
    const form = new FormData();
    for (const [k, v] of entries) form.append(k, encode(v));
    opts.files?.forEach((file, i) => form.append(`file-${i}`, new Blob([file.data], { type: file.type }), file.filename));
    body = form;
  } else {
    headers["content-type"] = "application/x-www-form-urlencoded";
    body = new URLSearchParams(entries.map(([k, v]): [string, string] => [k, encode(v)])).toString();
  }
  const res = await fetch(url, { method, headers, body, signal: opts.signal });
  const text = await res.text();
  let parsed: any;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error(`${method} ${apiPath}: not JSON (${res.status}): ${text.slice(0, 200)}`);
  }
  return { status: res.status, headers: res.headers, body: parsed };
}
