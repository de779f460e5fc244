/**
 * Code playgrounds: adding and removing them inside the realm actor, and the list (register, the event). Rules
 * follow Zulip's zerver/views/realm_playgrounds.py, zerver/actions/realm_playgrounds.py and
 * zerver/models/realm_playgrounds.py.
 */
import type { Kysely } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { isUrlTemplate, templateVariables } from "../rendering/url-template.ts";
import { chatErrors } from "../errors.ts";
import type { RealmAdministration } from "./linkifiers.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { AddPlayground, PlaygroundsProtocol, RemovePlayground } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";

/** Zulip's RealmPlayground.MAX_PYGMENTS_LANGUAGE_LENGTH. */
export const MAX_PYGMENTS_LANGUAGE_LENGTH = 40;

export interface PlaygroundObject {
  id: number;
  name: string;
  pygments_language: string;
  url_template: string;
}

export function playgroundObjects(db: Kysely<Database>, realmId: number): Promise<PlaygroundObject[]> {
  return db.selectFrom("realm_playgrounds").select(["id", "name", "pygments_language", "url_template"]).where("realm_id", "=", realmId).orderBy("id").execute();
}

export class RealmPlaygrounds {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: RealmAdministration,
  ) {}

  /** The playground operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<PlaygroundsProtocol, RealmPlaygrounds> = {
    addPlayground: (playgrounds, msg) => playgrounds.add(msg),
    removePlayground: (playgrounds, msg) => playgrounds.remove(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  /** Zulip's check_pygments_language, then RealmPlayground.full_clean. */
  private async add(msg: AddPlayground): Promise<{ id: number }> {
    await this.realm.actingAdministrator(msg.actingId);
    const name = msg.name.trim();
    const language = msg.pygmentsLanguage.trim();
    const urlTemplate = msg.urlTemplate.trim();
    if (msg.pygmentsLanguage.length > MAX_PYGMENTS_LANGUAGE_LENGTH) {
      throw errors.badRequest(`pygments_language is too long (limit: ${MAX_PYGMENTS_LANGUAGE_LENGTH} characters)`);
    }
    if (!/^[ a-zA-Z0-9_+\-./#]*$/.test(language)) throw errors.badRequest("Invalid characters in pygments language");
    if (!name) throw chatErrors.validationFailure("name", "This field cannot be blank.");
    if (!language) throw chatErrors.validationFailure("pygments_language", "This field cannot be blank.");
    if (!isUrlTemplate(urlTemplate)) throw chatErrors.validationFailure("url_template", "Invalid URL template.");
    const variables = templateVariables(urlTemplate);
    if (!variables.has("code")) throw chatErrors.validationFailure("__all__", 'Missing the required variable "code" in the URL template');
    if (variables.size !== 1) throw chatErrors.validationFailure("__all__", '"code" should be the only variable present in the URL template');
    const taken = await this.db
      .selectFrom("realm_playgrounds")
      .select("id")
      .where("realm_id", "=", this.realmId)
      .where("pygments_language", "=", language)
      .where("name", "=", name)
      .executeTakeFirst();
    if (taken) throw chatErrors.validationFailure("__all__", "Realm playground with this Realm, Pygments language and Name already exists.");
    const row = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.insertInto("realm_playgrounds").values({ realm_id: this.realmId, name, pygments_language: language, url_template: urlTemplate }).returning("id").executeTakeFirstOrThrow(),
    );
    await this.announce();
    return { id: row.id };
  }

  private async remove(msg: RemovePlayground): Promise<Record<string, never>> {
    await this.realm.actingAdministrator(msg.actingId);
    const deleted = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.deleteFrom("realm_playgrounds").where("realm_id", "=", this.realmId).where("id", "=", msg.id).executeTakeFirst(),
    );
    if (!Number(deleted.numDeletedRows)) throw errors.badRequest("Invalid playground");
    await this.announce();
    return {};
  }

  /** Zulip's notify_realm_playgrounds: everyone gets the whole list. */
  private async announce(): Promise<void> {
    await this.realm.tellRealm({ type: "realm_playgrounds", realm_playgrounds: await playgroundObjects(this.db, this.realmId) });
  }
}
