/** What the assistant's actors need beside ActorDeps: their settings, and a way to wake this node's webhook worker. */
import type { AssistantConfig } from "./config.ts";

export interface AssistantDeps {
  config: AssistantConfig;
  /** Called after a commit that queued webhook deliveries, so they go out without waiting for the next poll. */
  wakeWebhooks(): void;
}
