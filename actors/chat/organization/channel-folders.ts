/**
 * Channel folders: creating, renaming, describing, archiving and ordering them inside the realm actor, and the
 * list (GET /channel_folders, register). Rules follow Zulip's zerver/views/channel_folders.py and
 * zerver/lib/channel_folders.py: administrators only; a name is non-empty, printable and unique whatever its case.
 */
import { sql, type Kysely } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { renderMarkdown } from "../rendering/message-format.ts";
import type { RealmAdministration } from "./linkifiers.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { ChannelFoldersProtocol, CreateChannelFolder, ReorderChannelFolders, UpdateChannelFolder } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";

/** Zulip's ChannelFolder.MAX_NAME_LENGTH and MAX_DESCRIPTION_LENGTH (register's max_channel_folder_*_length). */
export const MAX_CHANNEL_FOLDER_NAME_LENGTH = 60;
export const MAX_CHANNEL_FOLDER_DESCRIPTION_LENGTH = 1024;

/** The organization's channel folders in their order (archived ones when asked for). */
export function channelFolderObjects(db: Kysely<Database>, realmId: number, includeArchived: boolean) {
  let query = db
    .selectFrom("channel_folders")
    .select(["id", "name", "description", "rendered_description", "order", "creator_id", "date_created", "is_archived"])
    .where("realm_id", "=", realmId);
  if (!includeArchived) query = query.where("is_archived", "=", false);
  return query.orderBy("order").orderBy("id").execute();
}

/** A folder of the organization that is not archived, which a channel may be put in. */
export function activeChannelFolder(db: Kysely<Database>, realmId: number, id: number) {
  return db.selectFrom("channel_folders").select("id").where("realm_id", "=", realmId).where("id", "=", id).where("is_archived", "=", false).executeTakeFirst();
}

/** Zulip's check_string_is_printable: the 1-based position of the first control or unassigned character. */
function unprintableAt(text: string): number | undefined {
  const at = [...text].findIndex((c) => /[\p{Cc}\p{Cs}\p{Cn}]/u.test(c));
  return at < 0 ? undefined : at + 1;
}

export class ChannelFolders {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: RealmAdministration,
  ) {}

  /** The channel folder operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<ChannelFoldersProtocol, ChannelFolders> = {
    createChannelFolder: (folders, msg) => folders.create(msg),
    updateChannelFolder: (folders, msg) => folders.update(msg),
    reorderChannelFolders: (folders, msg) => folders.reorder(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  /** Zulip's check_channel_folder_name; `except`: the folder being renamed. */
  private async checkName(name: string, except?: number): Promise<void> {
    if (!name.trim()) throw errors.badRequest("Channel folder name can't be empty.");
    const at = unprintableAt(name);
    if (at !== undefined) throw errors.badRequest(`Invalid character in channel folder name, at position ${at}.`);
    let query = this.db.selectFrom("channel_folders").select("id").where("realm_id", "=", this.realmId).where(sql`lower(name)`, "=", name.toLowerCase());
    if (except !== undefined) query = query.where("id", "!=", except);
    if (await query.executeTakeFirst()) throw errors.badRequest("Channel folder name already in use");
  }

  private async create(msg: CreateChannelFolder): Promise<{ channel_folder_id: number }> {
    await this.realm.actingAdministrator(msg.actingId);
    const name = msg.name.trim();
    await this.checkName(name);
    const description = msg.description.trim();
    const folder = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const last = await trx.selectFrom("channel_folders").select(sql<number | null>`max("order")`.as("order")).where("realm_id", "=", this.realmId).executeTakeFirst();
      return trx
        .insertInto("channel_folders")
        .values({
          realm_id: this.realmId,
          name,
          description,
          rendered_description: renderMarkdown(description),
          order: (last?.order ?? -1) + 1,
          creator_id: msg.actingId,
          date_created: Math.floor(Date.now() / 1000),
        })
        .returning(["id", "name", "description", "rendered_description", "order", "creator_id", "date_created", "is_archived"])
        .executeTakeFirstOrThrow();
    });
    await this.realm.tellRealm({ type: "channel_folder", op: "add", channel_folder: folder });
    return { channel_folder_id: folder.id };
  }

  private async update(msg: UpdateChannelFolder): Promise<Record<string, never>> {
    await this.realm.actingAdministrator(msg.actingId);
    const folder = await this.db.selectFrom("channel_folders").selectAll().where("realm_id", "=", this.realmId).where("id", "=", msg.id).executeTakeFirst();
    if (!folder) throw errors.badRequest("Invalid channel folder ID");
    const data: Record<string, unknown> = {};
    if (msg.name !== undefined) {
      const name = msg.name.trim();
      if (name !== folder.name) {
        await this.checkName(name, folder.id);
        data.name = name;
      }
    }
    if (msg.description !== undefined) {
      const description = msg.description.trim();
      if (description !== folder.description) Object.assign(data, { description, rendered_description: renderMarkdown(description) });
    }
    if (msg.isArchived !== undefined && msg.isArchived !== folder.is_archived) {
      // Zulip's check_channel_folder_in_use: a folder holding channels stays.
      const inUse = msg.isArchived && (await this.db.selectFrom("streams").select("id").where("realm_id", "=", this.realmId).where(sql`settings->>'folder_id'`, "=", String(folder.id)).executeTakeFirst());
      if (inUse) throw errors.badRequest("You need to remove all the channels from this folder to archive it.");
      data.is_archived = msg.isArchived;
    }
    if (!Object.keys(data).length) return {};
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("channel_folders").set(data).where("id", "=", folder.id).execute());
    // One event per changed part, as Zulip's do_change_channel_folder_* send them.
    const parts = [data.name !== undefined && { name: data.name }, data.description !== undefined && { description: data.description, rendered_description: data.rendered_description }, data.is_archived !== undefined && { is_archived: data.is_archived }];
    for (const part of parts) if (part) await this.realm.tellRealm({ type: "channel_folder", op: "update", channel_folder_id: folder.id, data: part });
    return {};
  }

  private async reorder(msg: ReorderChannelFolders): Promise<Record<string, never>> {
    await this.realm.actingAdministrator(msg.actingId);
    const ids = (await this.db.selectFrom("channel_folders").select("id").where("realm_id", "=", this.realmId).execute()).map((r) => r.id);
    const wanted = new Set(msg.order);
    if (wanted.size !== msg.order.length || wanted.size !== ids.length || ids.some((id) => !wanted.has(id))) throw errors.badRequest("Invalid order mapping");
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      for (const [order, id] of msg.order.entries()) await trx.updateTable("channel_folders").set({ order }).where("id", "=", id).execute();
    });
    await this.realm.tellRealm({ type: "channel_folder", op: "reorder", order: msg.order });
    return {};
  }
}
