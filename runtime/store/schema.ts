/**
 * The kernel's own tables, as kysely sees them: actor snapshots, shard leases and cluster membership. A product's
 * tables are declared beside it (actors/chat/schema.ts, actors/assistant/schema.ts) and the whole database's type is
 * composed in actors/schema.ts; the store is generic over it (Store<DB extends KernelTables>). Times are UNIX
 * seconds (bigint, read as numbers) unless a column says otherwise.
 */
import type { ColumnType } from "kysely";

/** A jsonb column: read as parsed JSON, written as JSON text. */
export type Json = ColumnType<unknown, string, string>;

export interface ActorSnapshotTable {
  kind: string;
  key: string;
  version: number;
  state: Json;
  updated_at: number;
}

export interface ShardLeaseTable {
  shard: number;
  owner: string | null;
  epoch: number;
  expires_at: Date;
}

export interface ClusterNodeTable {
  node_id: string;
  seen_at: Date;
}

/** The tables the kernel reads and writes; every deployment's database has at least these. */
export interface KernelTables {
  actor_snapshots: ActorSnapshotTable;
  shard_leases: ShardLeaseTable;
  cluster_nodes: ClusterNodeTable;
}
