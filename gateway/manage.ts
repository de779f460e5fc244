/**
 * The operators' command line: `npm run manage -- <command> [--flag value ...]`. It works on the store directly
 * (as Zulip's manage.py does), so on the embedded store the server must be stopped first; on Postgres it can run
 * beside the workers.
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { loadConfig } from "../runtime/config.ts";
import { Keyring, hashPassword } from "../runtime/secrets.ts";
import { findUserByEmail } from "../actors/reads.ts";
import { insertAccount, ROLE } from "../actors/realm.ts";
import { EMAIL } from "../actors/realm.ts";
import { lockDataDir } from "./lock.ts";
import { prepareStore, siteFor, writeZuliprc } from "./main.ts";

const HELP = `Usage: npm run manage -- <command> [options]

Commands:
  create-user --email E --name N [--role owner|administrator|moderator|member|guest] [--password P]
      Create an account; prints its user id and API key.
  zuliprc --email E [--site URL]
      Print a zuliprc for an existing account (its existing API key).
  help
      This text.

The store is the one the server uses: DATABASE_URL, else PGlite under DATA_DIR (default ./data).`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: { email: { type: "string" }, name: { type: "string" }, role: { type: "string" }, password: { type: "string" }, site: { type: "string" } },
  });
  if (!command || command === "help" || command === "--help") {
    console.log(HELP);
    return command ? 0 : 2;
  }
  const config = loadConfig();
  const unlock = config.databaseUrl ? () => {} : lockDataDir(config.dataDir, "the server");
  const keyring = Keyring.load(config.dataDir, config.secret);
  const { store, owner } = await prepareStore(config, keyring);
  if (owner) {
    const file = path.join(config.dataDir, "zuliprc");
    writeZuliprc(file, owner.email, owner.apiKey, siteFor(config, config.port));
    console.error(`manage: created the organization; the owner's credentials are in ${file}`);
  }
  try {
    switch (command) {
      case "create-user": {
        const email = values.email?.trim() ?? "";
        const name = values.name?.trim() ?? "";
        const role = ROLE[(values.role ?? "member") as keyof typeof ROLE];
        if (!EMAIL.test(email)) throw new Error("--email must be an e-mail address");
        if (!name) throw new Error("--name is required");
        if (!role) throw new Error(`--role must be one of ${Object.keys(ROLE).join(", ")}`);
        const realm = await store.db.selectFrom("realms").select("id").orderBy("id").executeTakeFirstOrThrow();
        const passwordHash = values.password ? await hashPassword(values.password) : null;
        const created = await store.db.transaction().execute((trx) => insertAccount(trx, realm.id, { email, fullName: name, passwordHash, role }, keyring));
        console.log(`created user ${created.user_id} (${email}, role ${role})\nAPI key: ${created.api_key}`);
        return 0;
      }
      case "zuliprc": {
        const user = values.email ? await findUserByEmail(store.db, values.email) : undefined;
        if (!user) throw new Error(`no account with e-mail ${values.email ?? "(missing --email)"}`);
        const site = values.site ?? siteFor(config, config.port);
        console.log(`[api]\nemail=${user.email}\nkey=${keyring.decrypt(user.api_key_enc)}\nsite=${site}`);
        return 0;
      }
      default:
        console.error(`unknown command '${command}'\n\n${HELP}`);
        return 2;
    }
  } finally {
    await store.close();
    unlock();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`manage: ${err instanceof Error ? err.message : err}`);
    process.exit(1);
  },
);
