/** Calls to this server's Zulip API from its own pages, with a sentence a person understands for every failure. */

export type ApiResult = { ok: true; body: Record<string, unknown> } | { ok: false; message: string };

/** POST /api/v1{path} with a form body (Zulip's encoding), unauthenticated. */
export async function postForm(path: string, params: Record<string, string>): Promise<ApiResult> {
  let res: Response;
  try {
    res = await fetch(`/api/v1${path}`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(params).toString() });
  } catch {
    return { ok: false, message: "Could not reach the server. Check your connection and try again." };
  }
  const body = (await res.json().catch(() => undefined)) as Record<string, unknown> | undefined;
  if (res.ok && body?.result === "success") return { ok: true, body };
  if (res.status === 429) {
    const after = Number(res.headers.get("retry-after") ?? body?.["retry-after"]);
    return { ok: false, message: `Too many attempts. Try again ${after > 0 ? `in ${Math.ceil(after / 60)} minute${after > 60 ? "s" : ""}` : "later"}.` };
  }
  const msg = typeof body?.msg === "string" && body.msg ? body.msg : `The server could not do this (HTTP ${res.status}). Try again later.`;
  return { ok: false, message: /[.!?]$/.test(msg) ? msg : `${msg}.` };
}
