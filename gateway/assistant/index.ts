/**
 * The assistant face, assembled: its HTTP app (embed, internal, mobile), the operator authenticator, the rate
 * limits, and, once the HTTP server exists, socket.io on the same uWS app.
 */
import type { AssistantConfig } from "../../actors/assistant/config.ts";
import type { Config } from "../../runtime/config.ts";
import type { Keyring } from "../../runtime/secrets.ts";
import type { PubSub } from "../../runtime/transport/pubsub.ts";
import type { Store } from "../../runtime/store/store.ts";
import type { ActorSystem } from "../../runtime/system.ts";
import type { HttpServer } from "../http.ts";
import type { RateLimiter } from "../rate-limiter.ts";
import { AssistantApp } from "./app.ts";
import { OperatorAuth } from "./auth.ts";
import { embedRoutes } from "./embed.ts";
import { internalRoutes } from "./internal.ts";
import { consoleRoutes } from "./console.ts";
import { RateLimits } from "./limits.ts";
import { mobileRoutes } from "./mobile.ts";
import { attachSockets } from "./sockets.ts";
import type { Database } from "../../actors/schema.ts";

export interface AssistantFace {
  app: AssistantApp;
  /** Attach socket.io to the listening server's uWS app. */
  attach(http: HttpServer): void;
  close(): Promise<void>;
}

export interface AssistantDeps {
  system: ActorSystem;
  store: Store<Database>;
  keyring: Keyring;
  config: Config;
  assistant: AssistantConfig;
  /** Relays the socket.io room events between workers (the same engine as the notices'). */
  pubsub: PubSub;
  /** The node's rate limit counts (shared with the chat face; closed by the node). */
  rateLimiter: RateLimiter;
}

export function assistantFace({ pubsub, rateLimiter, ...deps }: AssistantDeps): AssistantFace {
  const limits = new RateLimits(rateLimiter);
  const app = new AssistantApp({ ...deps, operators: new OperatorAuth(deps.store.db, deps.keyring), limits });
  app.add(...embedRoutes, ...internalRoutes, ...consoleRoutes, ...mobileRoutes);
  return {
    app,
    attach(http) {
      app.services.sockets = attachSockets(http.app, app.services, pubsub);
    },
    async close() {
      await app.services.sockets?.close();
    },
  };
}
