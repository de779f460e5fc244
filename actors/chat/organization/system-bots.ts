/**
 * Zulip's system bots (Notification Bot): the senders of the server's own messages. Created in a realm the first
 * time one is needed, by the actor about to send as it; the users table's unique e-mail index settles a race
 * between two such actors (the loser finds the winner's row).
 */
import type { Fence } from "../../../runtime/actor.ts";
import { ChorusError } from "../../../runtime/errors.ts";
import type { Keyring } from "../../../runtime/secrets.ts";
import type { Store } from "../../../runtime/store/store.ts";
import { insertAccount } from "./accounts.ts";
import { ROLE } from "./groups.ts";
import type { Database } from "../../schema.ts";
import type { ActorDeps } from "../../deps.ts";
import { dmKey } from "../conversations/dm.ts";
import { Dm } from "../conversations/dm.protocol.ts";

export const NOTIFICATION_BOT = { email: "notification-bot@zulip.com", fullName: "Notification Bot" };
export const WELCOME_BOT = { email: "welcome-bot@zulip.com", fullName: "Welcome Bot" };

/** Zulip's bot_type for a generic bot, which is what its system bots are. */
const DEFAULT_BOT = 1;

export interface BotUser {
  id: number;
  email: string;
  full_name: string;
}

export async function ensureSystemBot(store: Store<Database>, fence: Fence, keyring: Keyring, realmId: number, bot = NOTIFICATION_BOT): Promise<BotUser> {
  const find = () =>
    store.db.selectFrom("users").select(["id", "email", "full_name"]).where("realm_id", "=", realmId).where("delivery_email", "=", bot.email).executeTakeFirst();
  const found = await find();
  if (found) return found;
  try {
    await store.write(fence, async (trx) => {
      const created = await insertAccount(trx, realmId, { email: bot.email, fullName: bot.fullName, passwordHash: null, role: ROLE.member }, keyring);
      await trx.updateTable("users").set({ is_bot: true, bot_type: DEFAULT_BOT }).where("id", "=", created.user_id).execute();
    });
  } catch (err) {
    // Created meanwhile by another actor: fine, it is found below. Anything else is a real failure.
    if (!(err instanceof ChorusError && err.code === "BAD_REQUEST") && !String((err as Error)?.message).includes("unique")) throw err;
  }
  return (await find())!;
}

/**
 * A direct message from a system bot to a user, created with the bot if need be. `sendKey` makes it once only: a
 * repeated call with the same key answers the message stored the first time.
 */
export async function sendAsSystemBot(deps: ActorDeps, fence: Fence, realmId: number, which: typeof NOTIFICATION_BOT, to: number, content: string, sendKey: string): Promise<number> {
  const bot = await ensureSystemBot(deps.store, fence, deps.keyring, realmId, which);
  const sent = await deps.system().ref(Dm, dmKey([bot.id, to])).ask({
    op: "send",
    senderId: bot.id,
    sender: { email: bot.email, full_name: bot.full_name },
    content,
    client: "Internal",
    sendKey,
    readBySender: true,
  });
  return sent.id;
}
