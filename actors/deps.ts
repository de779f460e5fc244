/** What every actor is built with, and the per-process message id allocator. */
import type { Config } from "../runtime/config.ts";
import type { Keyring } from "../runtime/secrets.ts";
import type { Store } from "../runtime/store/store.ts";
import type { ActorSystem } from "../runtime/system.ts";
import type { ChatConfig } from "./chat/config.ts";
import type { MessageLog } from "./chat/message-log.ts";
import type { Database } from "./schema.ts";

export interface ActorDeps {
  store: Store<Database>;
  /** Chat's message log (messages, recipient lists, users' event streams, message id blocks) over `store`. */
  messageLog: MessageLog;
  keyring: Keyring;
  config: Config;
  /** Chat's own settings (event queues, e-mail, the message log's tuning). */
  chat: ChatConfig;
  ids: MessageIds;
  /** Set once the system exists (actors are built by it, so they cannot be built with it). */
  system(): ActorSystem;
}

/**
 * Message ids, handed out from blocks the store allocates. A conversation that moves to this process (shard
 * take-over) may have used ids from a later block elsewhere: `next(above)` skips to a fresh block whenever the
 * current one is not above the conversation's last id, so ids keep increasing within every conversation.
 */
export class MessageIds {
  private next = 0;
  private end = 0;
  private refill?: Promise<void>;

  constructor(private readonly log: MessageLog) {}

  async take(above: number): Promise<number> {
    while (this.next >= this.end || this.next <= above) {
      this.refill ??= this.log.allocateMessageIds().then(
        (block) => {
          this.next = block.first;
          this.end = block.first + block.size;
          this.refill = undefined;
        },
        (err) => {
          this.refill = undefined;
          throw err;
        },
      );
      await this.refill;
    }
    return this.next++;
  }
}
