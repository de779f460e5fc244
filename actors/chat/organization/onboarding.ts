/**
 * What a new account finds waiting: Welcome Bot's direct message, as Zulip's send_initial_direct_message sends one to
 * every new human account (its realm's creator included). Zulip's clients count on a feed that is never empty:
 * zulip-terminal cannot start for a user without a single message. Off with WELCOME_MESSAGES=off (ChatConfig).
 */
import type { Fence } from "../../../runtime/actor.ts";
import type { ActorDeps } from "../../deps.ts";
import { ROLE } from "./groups.ts";
import { sendAsSystemBot, WELCOME_BOT } from "./system-bots.ts";

/** Welcome Bot's greeting; administrators are also told where the organization's settings start. */
export function welcomeText(role: number): string {
  const forAdministrators =
    role <= ROLE.administrator ? " As an administrator, you can invite people and create channels from any of them, or with `npm run manage` on the server." : "";
  return (
    "Hello, and welcome to Chorus! 👋 This is a direct message from me, Welcome Bot.\n\n" +
    "This server speaks Zulip's API: Zulip's mobile, desktop and terminal apps, and its Python and JavaScript " +
    `libraries, all work with it.${forAdministrators}`
  );
}

/** Welcome Bot's message to a new account, once (its send key names the account); nothing when turned off. */
export async function welcomeNewUser(deps: ActorDeps, fence: Fence, realmId: number, userId: number): Promise<void> {
  if (!deps.chat.welcomeMessages) return;
  const user = await deps.store.db.selectFrom("users").select(["role", "is_bot"]).where("id", "=", userId).executeTakeFirstOrThrow();
  if (user.is_bot) return;
  await sendAsSystemBot(deps, fence, realmId, WELCOME_BOT, userId, welcomeText(user.role), `welcome:${userId}`);
}
