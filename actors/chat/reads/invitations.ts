/** Reads of invitations by the key a person holds: what the join page shows for it. Nothing here writes. */
import type { Kysely } from "kysely";
import type { Database } from "../../schema.ts";
import { hashEmailKey } from "../organization/mail.ts";
import { unusableReason } from "../organization/invites.ts";

/**
 * What a `/join/{key}/` key is: an e-mailed invitation (the person picks a name and password), a reusable link
 * (the person gives their address first, POST /invites/join), or nothing; with why it cannot be used, if so.
 */
export type JoinKey = { kind: "invitation"; email: string; unusable?: string } | { kind: "link"; unusable?: string } | undefined;

export async function joinKey(db: Kysely<Database>, realmId: number, key: string): Promise<JoinKey> {
  const hash = hashEmailKey(key);
  const invite = await db.selectFrom("invitations").select(["email", "status", "expires_at", "link_id"]).where("key_hash", "=", hash).where("realm_id", "=", realmId).executeTakeFirst();
  if (invite) {
    const link = invite.link_id === null ? undefined : await db.selectFrom("invite_links").select(["status", "expires_at"]).where("id", "=", invite.link_id).executeTakeFirst();
    return { kind: "invitation", email: invite.email, unusable: unusableReason(invite) ?? (link && unusableReason(link)) };
  }
  const link = await db.selectFrom("invite_links").select(["status", "expires_at"]).where("key_hash", "=", hash).where("realm_id", "=", realmId).executeTakeFirst();
  return link ? { kind: "link", unusable: unusableReason(link) } : undefined;
}
