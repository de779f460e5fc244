/**
 * `npx tsx bench/trace-register.ts [--messages N] [--users N] [--embedded] [--rounds N] [--type T]`: where POST /register's
 * time goes on a generated organization (bench/organization.ts), as its ordinary and heavy readers. Registers once
 * per initial-state type (`fetch_event_types=[type]`), then with every type, and prints each one's median time and
 * answer size, the server's CPU time across the requests (process.cpuUsage: the node runs in this process) and how
 * much of each answer's time is JSON serialization. What docs/reads.md's register figures come from.
 */
import type { Janitor } from "./janitor.ts";
import { Population, startEngine, type Engine } from "./scenarios.ts";
import { DEFAULT_SIZE, generateOrganization } from "./organization.ts";

const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : undefined;
};
const size = { ...DEFAULT_SIZE, messages: arg("messages") ?? 200_000, users: arg("users") ?? DEFAULT_SIZE.users };
const rounds = arg("rounds") ?? 5;
const TYPES = [
  "message", "subscription", "stream", "default_streams", "realm", "user_settings", "realm_user_settings_defaults",
  "realm_user_groups", "update_message_flags", "presence", "drafts", "user_topic", "realm_emoji", "realm_user",
  "user_status", "muted_topics", "starred_messages", "custom_profile_fields", "channel_folders", "alert_words",
  "recent_private_conversations",
];

const stops: Array<() => Promise<void>> = [];
const janitor: Janitor = { watch: () => {}, release: () => {} };
let engine: Engine | undefined;

async function register(authorization: string, fetchTypes: string[] | null): Promise<{ ms: number; cpuMs: number; bytes: number; stringifyMs: number }> {
  const body = new URLSearchParams({ apply_markdown: "true", client_gravatar: "true", slim_presence: "true" });
  if (fetchTypes) body.set("fetch_event_types", JSON.stringify(fetchTypes));
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const res = await fetch(engine!.baseUrl + "/api/v1/register", { method: "POST", headers: { authorization, "content-type": "application/x-www-form-urlencoded" }, body });
  const text = await res.text();
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  if (!res.ok) throw new Error(`register ${fetchTypes} → ${res.status}: ${text.slice(0, 300)}`);
  const parsed = JSON.parse(text) as Record<string, unknown>;
  const s0 = performance.now();
  JSON.stringify(parsed);
  const stringifyMs = performance.now() - s0;
  await fetch(engine!.baseUrl + `/api/v1/events?queue_id=${encodeURIComponent(String(parsed.queue_id))}`, { method: "DELETE", headers: { authorization } });
  return { ms, cpuMs: (cpu.user + cpu.system) / 1000, bytes: text.length, stringifyMs };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

try {
  engine = await startEngine(process.argv.includes("--embedded") ? "embedded" : "redis+postgres", (stop) => stops.push(stop), janitor);
  const population = new Population(engine);
  const [ordinary, heavy] = await population.users("readers", 2);
  const org = await generateOrganization(engine.node.store.db, { ordinary: ordinary!.id, heavy: heavy!.id }, size);
  console.log(`generated ${org.messages.toLocaleString("en")} messages, ${size.users} users in ${org.seconds} s`);
  for (const [who, auth] of [["ordinary", ordinary!.auth], ["heavy", heavy!.auth]] as const) {
    console.log(`\n${who} reader: type | median ms | median CPU ms (this process) | answer bytes | JSON.stringify ms`);
    const only = process.argv.includes("--type") ? process.argv[process.argv.indexOf("--type") + 1]! : undefined;
    for (const type of only ? [[only]] : [...TYPES.map((t) => [t]), null]) {
      await register(auth, type); // warm
      const runs = [];
      for (let i = 0; i < rounds; i++) runs.push(await register(auth, type));
      const name = type ? type[0] : "(all)";
      console.log(`${name} | ${median(runs.map((r) => r.ms)).toFixed(1)} | ${median(runs.map((r) => r.cpuMs)).toFixed(1)} | ${runs[0]!.bytes} | ${median(runs.map((r) => r.stringifyMs)).toFixed(1)}`);
    }
  }
} finally {
  for (const stop of stops.reverse()) await stop();
}
