/**
 * Reads of the assistant's tables that need no actor: agent lookups, session history, lists, and the operators' API
 * keys and console sessions (by hash) with their accounts. Nothing here writes.
 */
import { sql, type Kysely } from "kysely";
import type { Source } from "./agent-session.protocol.ts";
import type { Database } from "../schema.ts";

type DB = Kysely<Database>;

export interface AgentSummary {
  id: string;
  realm_id: number;
  agent_key: string;
  name: string;
  secret_enc: string;
  allowed_origins: string[];
  rate_limit_per_minute: number;
}

const agentColumns = ["id", "realm_id", "agent_key", "name", "secret_enc", "allowed_origins", "rate_limit_per_minute"] as const;

export async function agentByKey(db: DB, key: string): Promise<AgentSummary | undefined> {
  const row = await db.selectFrom("assistant_agents").select(agentColumns).where("agent_key", "=", key).executeTakeFirst();
  return row && { ...row, allowed_origins: row.allowed_origins as string[] };
}

export async function agentById(db: DB, id: string): Promise<AgentSummary | undefined> {
  const row = await db.selectFrom("assistant_agents").select(agentColumns).where("id", "=", id).executeTakeFirst();
  return row && { ...row, allowed_origins: row.allowed_origins as string[] };
}

/** Every agent of the server, oldest first, with its published version and how many versions it has (the CLI's list-agents). */
export function agentsWithVersionCounts(db: DB) {
  return db
    .selectFrom("assistant_agents")
    .select((eb) => [
      "id",
      "name",
      "agent_key",
      "published_version_id",
      eb.selectFrom("assistant_versions").select((v) => v.fn.countAll<number>().as("n")).whereRef("agent_id", "=", "assistant_agents.id").as("versions"),
    ])
    .orderBy("created_at")
    .orderBy("id")
    .execute();
}

export function realmAgents(db: DB, realmId: number) {
  return db.selectFrom("assistant_agents").select(["id as agent_id", "name"]).where("realm_id", "=", realmId).orderBy("created_at").orderBy("id").execute();
}

export function sessionById(db: DB, id: string) {
  return db
    .selectFrom("assistant_sessions")
    .innerJoin("assistant_agents", "assistant_agents.id", "assistant_sessions.agent_id")
    .select(["assistant_sessions.id", "assistant_sessions.agent_id", "assistant_sessions.user_id", "assistant_sessions.created_at", "assistant_agents.realm_id"])
    .where("assistant_sessions.id", "=", id)
    .executeTakeFirst();
}

export async function sessionMessages(db: DB, sessionId: string) {
  const rows = await db
    .selectFrom("assistant_messages")
    .select(["id", "role", "content", "sources", "created_at"])
    .where("session_id", "=", sessionId)
    .orderBy("seq")
    .execute();
  return rows.map((r) => ({
    id: r.id,
    role: r.role,
    content: r.content,
    created_at: new Date(r.created_at * 1000).toISOString(),
    ...(r.role === "assistant" ? { sources: r.sources as Source[] } : {}),
  }));
}

/** The agent's latest sessions; only `userId`'s when given. */
export async function agentSessions(db: DB, agentId: string, limit: number, userId?: string) {
  let query = db.selectFrom("assistant_sessions").select(["id", "user_id", "created_at"]).where("agent_id", "=", agentId);
  if (userId !== undefined) query = query.where("user_id", "=", userId);
  const rows = await query
    .orderBy("created_at", "desc")
    .orderBy("id")
    .limit(limit)
    .execute();
  return rows.map((r) => ({ session_id: r.id, user_id: r.user_id, created_at: new Date(r.created_at * 1000).toISOString() }));
}

/** The account behind an operator API key (by the key's hash), with whether the key is revoked; undefined for none. */
export function operatorByApiKeyHash(db: DB, keyHash: string) {
  return db
    .selectFrom("operator_api_keys")
    .innerJoin("users", "users.id", "operator_api_keys.user_id")
    .innerJoin("realms", "realms.id", "users.realm_id")
    .select(["users.id", "users.realm_id", "users.delivery_email", "users.role", "users.is_active", "realms.deactivated", "operator_api_keys.revoked"])
    .where("operator_api_keys.key_hash", "=", keyHash)
    .executeTakeFirst();
}

/** The account behind an unexpired console session (by the token's hash), with the session's CSRF token; undefined for none. */
export function operatorBySessionHash(db: DB, tokenHash: string) {
  return db
    .selectFrom("operator_sessions")
    .innerJoin("users", "users.id", "operator_sessions.user_id")
    .innerJoin("realms", "realms.id", "users.realm_id")
    .select(["users.id", "users.realm_id", "users.delivery_email", "users.role", "users.is_active", "realms.deactivated", "operator_sessions.csrf_token"])
    .where("operator_sessions.token_hash", "=", tokenHash)
    .where("operator_sessions.expires_at", ">", sql<number>`${Math.floor(Date.now() / 1000)}`)
    .executeTakeFirst();
}
