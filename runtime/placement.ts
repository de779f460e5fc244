/**
 * Where a shard lives: rendezvous (highest-random-weight) hashing over the live members. Every member computes the
 * same answer from the same member list, with no coordination; when a member joins or leaves, only the shards whose
 * top-scoring member changed move (about 1/N of them), and the rest stay put.
 */
import { createHash } from "node:crypto";

function score(member: string, shard: number): number {
  // Four bytes of SHA-1 spread the scores evenly for any naming of members (node ids share long prefixes).
  return createHash("sha1").update(`${shard}/${member}`).digest().readUInt32BE(0);
}

/** The member each shard belongs to: `homes[shard]`. Members are node ids; the list must not be empty. */
export function placeShards(shards: number, members: Iterable<string>): string[] {
  const list = [...new Set(members)].sort();
  if (list.length === 0) throw new Error("placeShards: no members");
  const homes: string[] = [];
  for (let shard = 0; shard < shards; shard++) {
    let best = list[0]!;
    let bestScore = -1;
    for (const member of list) {
      const s = score(member, shard);
      // Ties (one in four billion) go to the smaller id: every member breaks them alike.
      if (s > bestScore) [best, bestScore] = [member, s];
    }
    homes.push(best);
  }
  return homes;
}
