/**
 * Linkifiers: adding, changing, removing and reordering them inside the realm actor, the list (GET
 * /realm/linkifiers, register, the event) and the compiled set markdown applies on the send path. Rules follow
 * Zulip's zerver/views/realm_linkifiers.py, zerver/actions/realm_linkifiers.py and zerver/models/linkifiers.py.
 */
import type { Kysely } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { compileLinkifier, patternGroups, type CompiledLinkifier, type Linkifier } from "../rendering/linkifiers.ts";
import type { CapabilityFilter } from "../users/user.protocol.ts";
import { isUrlTemplate, templateVariables } from "../rendering/url-template.ts";
import { chatErrors } from "../errors.ts";
import { NoticedRealmCache } from "../realm-cache.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { AddLinkifier, LinkifiersProtocol, RemoveLinkifier, ReorderLinkifiers, UpdateLinkifier } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";

/** The realm's linkifiers in their order (Zulip's linkifiers_for_realm). */
export async function linkifierObjects(db: Kysely<Database>, realmId: number): Promise<Linkifier[]> {
  return db.selectFrom("realm_linkifiers").select(["id", "pattern", "url_template"]).where("realm_id", "=", realmId).orderBy("order").orderBy("id").execute();
}

/** What markdown applies, per realm; forgotten on every change here, and on other workers by a notice. */
export const compiledLinkifiers = new NoticedRealmCache<CompiledLinkifier[]>("linkifiers-changed", async (db, realmId) =>
  (await linkifierObjects(db, realmId)).flatMap((l) => {
    try {
      return [compileLinkifier(l.pattern, l.url_template)];
    } catch {
      return []; // checked when stored; a pattern this engine cannot take links nothing
    }
  }),
);

/** Zulip's RealmFilter.full_clean: the template, the pattern, then that the two name the same groups. */
function checkLinkifier(pattern: string, urlTemplate: string): void {
  if (!isUrlTemplate(urlTemplate)) throw chatErrors.validationFailure("url_template", "Invalid URL template.");
  let groups: Set<string>;
  try {
    compileLinkifier(pattern, urlTemplate);
    groups = patternGroups(pattern);
  } catch (err) {
    // The engine's reason without the pattern it quotes (ours, with Zulip's boundaries around the admin's).
    const reason = (err as Error).message.replace(/^Invalid regular expression: \/.*\/[a-z]*: /s, "");
    throw chatErrors.validationFailure("__all__", `Bad regular expression: ${reason}`);
  }
  const variables = templateVariables(urlTemplate);
  const notInPattern = [...variables].filter((v) => !groups.has(v)).sort();
  if (notInPattern.length) throw chatErrors.validationFailure("__all__", `Group '${notInPattern[0]}' in URL template is not present in linkifier pattern.`);
  const notInTemplate = [...groups].filter((g) => !variables.has(g)).sort();
  if (notInTemplate.length) throw chatErrors.validationFailure("__all__", `Group '${notInTemplate[0]}' in linkifier pattern is not present in URL template.`);
}

/** What the realm actor lends the parts only administrators change (linkifiers, playgrounds). */
export interface RealmAdministration {
  /** Zulip's require_realm_admin: the acting user, if an administrator. */
  actingAdministrator(id: number): Promise<unknown>;
  /** `capability`: only to the queues whose clients declared (or did not declare) it. */
  tellRealm(event: Record<string, unknown>, capability?: CapabilityFilter): Promise<void>;
}

export class RealmLinkifiers {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: RealmAdministration,
  ) {}

  /** The linkifier operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<LinkifiersProtocol, RealmLinkifiers> = {
    addLinkifier: (linkifiers, msg) => linkifiers.add(msg),
    updateLinkifier: (linkifiers, msg) => linkifiers.update(msg),
    removeLinkifier: (linkifiers, msg) => linkifiers.remove(msg),
    reorderLinkifiers: (linkifiers, msg) => linkifiers.reorder(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  private async patternTaken(pattern: string, exceptId?: number): Promise<void> {
    let query = this.db.selectFrom("realm_linkifiers").select("id").where("realm_id", "=", this.realmId).where("pattern", "=", pattern);
    if (exceptId !== undefined) query = query.where("id", "!=", exceptId);
    if (await query.executeTakeFirst()) throw chatErrors.validationFailure("__all__", "Realm filter with this Realm and Pattern already exists.");
  }

  private async existing(id: number): Promise<void> {
    const row = await this.db.selectFrom("realm_linkifiers").select("id").where("realm_id", "=", this.realmId).where("id", "=", id).executeTakeFirst();
    if (!row) throw errors.badRequest("Linkifier not found.");
  }

  private async add(msg: AddLinkifier): Promise<{ id: number }> {
    await this.realm.actingAdministrator(msg.actingId);
    const pattern = msg.pattern.trim();
    const urlTemplate = msg.urlTemplate.trim();
    checkLinkifier(pattern, urlTemplate);
    await this.patternTaken(pattern);
    const id = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      // A new linkifier goes last.
      const last = await trx.selectFrom("realm_linkifiers").select((eb) => eb.fn.max("order").as("order")).where("realm_id", "=", this.realmId).executeTakeFirst();
      const order = last?.order === null || last?.order === undefined ? 0 : Number(last.order) + 1;
      const row = await trx.insertInto("realm_linkifiers").values({ realm_id: this.realmId, pattern, url_template: urlTemplate, order }).returning("id").executeTakeFirstOrThrow();
      return row.id;
    });
    await this.announce();
    return { id };
  }

  private async update(msg: UpdateLinkifier): Promise<Record<string, never>> {
    await this.realm.actingAdministrator(msg.actingId);
    await this.existing(msg.id);
    const pattern = msg.pattern.trim();
    const urlTemplate = msg.urlTemplate.trim();
    checkLinkifier(pattern, urlTemplate);
    await this.patternTaken(pattern, msg.id);
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.updateTable("realm_linkifiers").set({ pattern, url_template: urlTemplate }).where("id", "=", msg.id).where("realm_id", "=", this.realmId).execute(),
    );
    await this.announce();
    return {};
  }

  private async remove(msg: RemoveLinkifier): Promise<Record<string, never>> {
    await this.realm.actingAdministrator(msg.actingId);
    await this.existing(msg.id);
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("realm_linkifiers").where("id", "=", msg.id).where("realm_id", "=", this.realmId).execute());
    await this.announce();
    return {};
  }

  /** Zulip's check_reorder_linkifiers: every linkifier exactly once. */
  private async reorder(msg: ReorderLinkifiers): Promise<Record<string, never>> {
    await this.realm.actingAdministrator(msg.actingId);
    const wanted = new Set(msg.order);
    if (wanted.size < msg.order.length) throw errors.badRequest("The ordered list must not contain duplicated linkifiers");
    const ids = (await linkifierObjects(this.db, this.realmId)).map((l) => l.id);
    if (ids.length !== wanted.size || ids.some((id) => !wanted.has(id))) {
      throw errors.badRequest("The ordered list must enumerate all existing linkifiers exactly once");
    }
    if (!ids.length) return {};
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      for (const [order, id] of msg.order.entries()) await trx.updateTable("realm_linkifiers").set({ order }).where("id", "=", id).execute();
    });
    await this.announce();
    return {};
  }

  /** Zulip's notify_linkifiers: everyone gets the whole ordered list (queues without the capability drop it). */
  private async announce(): Promise<void> {
    await compiledLinkifiers.changed(this.deps.system(), this.realmId);
    // With URL templates, for the clients that said they understand them (zulip.yaml's linkifier_url_template).
    await this.realm.tellRealm({ type: "realm_linkifiers", realm_linkifiers: await linkifierObjects(this.db, this.realmId) }, { name: "linkifier_url_template", declared: true });
  }
}
