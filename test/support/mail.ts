/** The e-mails the server queued in its outbox (no SMTP in tests: they stay there). */
import type { TestServer } from "./server.ts";

/** The e-mail most recently queued for this address. */
export function lastEmailTo(server: TestServer, address: string) {
  return server.node.store.db.selectFrom("email_outbox").selectAll().where("to_address", "=", address).orderBy("id", "desc").executeTakeFirstOrThrow();
}

/** The key in the e-mail most recently queued for this address (invitations, e-mail changes, password resets). */
export async function emailKeyFor(server: TestServer, address: string): Promise<string> {
  return /(?:key=|\/join\/|\/password\/reset\/)([\w-]+)/.exec((await lastEmailTo(server, address)).body)![1]!;
}
