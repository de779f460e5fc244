/**
 * The assistant's settings, read from the environment in one place (beside config.ts, which the chat face owns).
 * Read when a node starts, so a test may set the variables before starting its server.
 */
export interface AssistantConfig {
  /** Hosts webhooks may reach even though they resolve to loopback, private or link-local addresses. */
  webhookAllowHosts: Set<string>;
  /** How often the webhook worker looks for due deliveries when nothing woke it. */
  webhookPollMs: number;
  /** First retry delay; each further retry doubles it (with jitter), up to an hour. */
  webhookRetryBaseMs: number;
  /** Deliveries that failed this many times are given up (status `failed`). */
  webhookMaxAttempts: number;
  webhookTimeoutMs: number;
  /** Comment ping on open SSE streams. */
  ssePingMs: number;
  /** Rate limit of an agent created without one (requests per minute, per IP and per verified user). */
  defaultRateLimitPerMinute: number;
  /** Optional OpenAI-compatible generator; the extractive answerer when unset. */
  llm?: { baseUrl: string; apiKey?: string; model: string };
}

function int(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

export function loadAssistantConfig(): AssistantConfig {
  const env = process.env;
  return {
    webhookAllowHosts: new Set(
      (env.WEBHOOK_ALLOW_HOSTS ?? "")
        .split(",")
        .map((h) => h.trim().toLowerCase())
        .filter(Boolean),
    ),
    webhookPollMs: Math.max(10, int("WEBHOOK_POLL_MS", 1000)),
    webhookRetryBaseMs: Math.max(1, int("WEBHOOK_RETRY_BASE_MS", 5000)),
    webhookMaxAttempts: Math.max(1, int("WEBHOOK_MAX_ATTEMPTS", 8)),
    webhookTimeoutMs: Math.max(100, int("WEBHOOK_TIMEOUT_MS", 10_000)),
    ssePingMs: Math.max(10, int("SSE_PING_MS", 15_000)),
    defaultRateLimitPerMinute: Math.max(1, int("ASSISTANT_RATE_LIMIT_PER_MINUTE", 60)),
    llm: env.LLM_BASE_URL ? { baseUrl: env.LLM_BASE_URL, apiKey: env.LLM_API_KEY || undefined, model: env.LLM_MODEL ?? "gpt-4o-mini" } : undefined,
  };
}
