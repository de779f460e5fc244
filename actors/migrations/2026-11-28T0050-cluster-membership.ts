/**
 * Workers are no longer numbered: the cluster's members are the node ids with a recent heartbeat, on any host
 * (runtime/cluster.ts), so a worker's index says nothing and the column goes.
 */
import type { Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("cluster_nodes").dropColumn("worker_index").execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
