/**
 * Uploaded files (Zulip's Attachment): their records, made and removed in the realm actor (one turn at a time per
 * realm, so the upload quota holds), and the reads every other part needs (the list, access, detached uploads).
 * The bytes live in the blob store (runtime/blobs), written and deleted by the gateway around these records; the
 * links between files and messages are kept by the store itself (see migrations/2026-11-27T2100-attachments.ts).
 * Rules follow Zulip's zerver/lib/attachments.py, zerver/actions/uploads.py and zerver/lib/upload/__init__.py.
 */
import type { Kysely } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import type { ActorSystem } from "../../../runtime/system.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { ActorDeps } from "../../deps.ts";
import { User } from "../users/user.protocol.ts";
import type { AttachmentsProtocol, DeleteAttachment, RecordThumbnails, RecordUpload } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";
import { storedFormatName, thumbnailBlobKey, uploadPreview, type StoredThumbnail, type UploadPreview } from "../rendering/thumbnails.ts";

type DB = Kysely<Database>;

/** Zulip's Attachment as its API documents it: times in milliseconds. */
export interface AttachmentObject {
  id: number;
  name: string;
  path_id: string;
  size: number;
  create_time: number;
  messages: Array<{ id: number; date_sent: number }>;
}

/** The objects of the given attachments (all of one owner's when `ownerId`), newest first, with their messages. */
export async function attachmentObjects(db: DB, which: { ownerId: number } | { ids: number[] }): Promise<AttachmentObject[]> {
  let query = db.selectFrom("attachments").select(["id", "file_name", "path_id", "size", "create_time"]).orderBy("id", "desc");
  if ("ownerId" in which) query = query.where("owner_id", "=", which.ownerId);
  else if (!which.ids.length) return [];
  else query = query.where("id", "in", which.ids);
  const rows = await query.execute();
  if (!rows.length) return [];
  const links = await db
    .selectFrom("attachment_messages as am")
    .innerJoin("messages as m", "m.id", "am.message_id")
    .select(["am.attachment_id", "m.id", "m.date_sent"])
    .where(
      "am.attachment_id",
      "in",
      rows.map((r) => r.id),
    )
    .orderBy("m.id")
    .execute();
  const byAttachment = new Map<number, AttachmentObject["messages"]>();
  for (const l of links) {
    const list = byAttachment.get(l.attachment_id) ?? [];
    list.push({ id: Number(l.id), date_sent: Number(l.date_sent) * 1000 });
    byAttachment.set(l.attachment_id, list);
  }
  return rows.map((r) => ({
    id: r.id,
    name: r.file_name,
    path_id: r.path_id,
    size: Number(r.size),
    create_time: Number(r.create_time) * 1000,
    messages: byAttachment.get(r.id) ?? [],
  }));
}

/** Bytes the realm's files take: what its quota is measured against (Zulip's currently_used_upload_space_bytes). */
export async function uploadSpaceUsed(db: DB, realmId: number): Promise<number> {
  const row = await db.selectFrom("attachments").select((eb) => eb.fn.sum<string | number | null>("size").as("used")).where("realm_id", "=", realmId).executeTakeFirst();
  return Number(row?.used ?? 0);
}

/**
 * The record of a file in a realm (never another realm's) by its path as a URL or a client has it: percent-encoded
 * as we link it, or decoded; undefined when there is none.
 */
export function attachmentByPath(db: DB, realmId: number, path: string) {
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    // not percent-encoded after all: the path as given is all there is
  }
  return db
    .selectFrom("attachments")
    .selectAll()
    .where("realm_id", "=", realmId)
    .where((eb) => eb.or([eb("url_path", "=", path), eb("path_id", "=", decoded), eb("path_id", "=", path)]))
    .executeTakeFirst();
}

/**
 * The image records of the uploads among `paths` (as a message links them: encoded or not), keyed by each way of
 * writing the path, for rendering their previews.
 */
export async function uploadPreviews(db: DB, realmId: number, paths: string[]): Promise<Map<string, UploadPreview>> {
  const out = new Map<string, UploadPreview>();
  if (!paths.length) return out;
  const decoded = paths.map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  const rows = await db
    .selectFrom("image_attachments as i")
    .innerJoin("attachments as a", "a.id", "i.attachment_id")
    .select(["a.url_path", "i.path_id", "i.original_width_px", "i.original_height_px", "i.frames", "i.content_type", "i.thumbnail_metadata"])
    .where("a.realm_id", "=", realmId)
    .where((eb) => eb.or([eb("a.url_path", "in", paths), eb("a.path_id", "in", [...paths, ...decoded])]))
    .execute();
  for (const row of rows) {
    const preview = uploadPreview(row);
    out.set(row.url_path, preview);
    out.set(row.path_id, preview);
  }
  return out;
}

/** The messages linking a file. */
export async function linkedMessageIds(db: DB, attachmentId: number): Promise<number[]> {
  const rows = await db.selectFrom("attachment_messages").select("message_id").where("attachment_id", "=", attachmentId).execute();
  return rows.map((r) => Number(r.message_id));
}

/** The files linked from messages, by id (read before an edit or a deletion, to compare with after it). */
export async function attachmentsOfMessages(db: DB, messageIds: number[]): Promise<number[]> {
  if (!messageIds.length) return [];
  const rows = await db.selectFrom("attachment_messages").select("attachment_id").distinct().where("message_id", "in", messageIds).execute();
  return rows.map((r) => r.attachment_id);
}

/**
 * The messages linking these files changed (a send, an edit, a deletion): each file's owner gets Zulip's `attachment`
 * event with op `update` and the file's object as it is now (Zulip's notify_attachment_update). Zulip sends it to
 * the sender of a message claiming the file, and only for claims; Chorus tells the owner, whose list
 * (GET /attachments) it is, whenever a file's `messages` change.
 */
export async function notifyAttachmentUpdates(db: DB, system: ActorSystem, attachmentIds: number[]): Promise<void> {
  if (!attachmentIds.length) return;
  const owners = await db.selectFrom("attachments").select(["id", "owner_id", "realm_id"]).where("id", "in", attachmentIds).execute();
  if (!owners.length) return;
  const objects = new Map((await attachmentObjects(db, { ids: owners.map((o) => o.id) })).map((a) => [a.id, a]));
  const used = new Map<number, number>();
  for (const realmId of new Set(owners.map((o) => o.realm_id))) used.set(realmId, await uploadSpaceUsed(db, realmId));
  await Promise.all(
    owners.map((o) => {
      const event = { type: "attachment", op: "update", attachment: objects.get(o.id), upload_space_used: used.get(o.realm_id) };
      return system.broadcast(User, [o.owner_id], { op: "deliverEvent", event });
    }),
  );
}

/**
 * Of the given files, those of `ownerId` that no message links any more: an edit's `detached_uploads` (Zulip's
 * get_old_unclaimed_attachments for one edit), which the client offers to delete.
 */
export async function detachedUploads(db: DB, ownerId: number, attachmentIds: number[]): Promise<AttachmentObject[]> {
  if (!attachmentIds.length) return [];
  const rows = await db
    .selectFrom("attachments as a")
    .select("a.id")
    .where("a.id", "in", attachmentIds)
    .where("a.owner_id", "=", ownerId)
    .where(({ not, exists, selectFrom }) => not(exists(selectFrom("attachment_messages as am").select("am.message_id").whereRef("am.attachment_id", "=", "a.id"))))
    .execute();
  return attachmentObjects(db, { ids: rows.map((r) => r.id) });
}

// ---- changes, in the realm actor ----------------------------------------------------------------------------

export class RealmAttachments {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: {
      /** The acting user as the store has them now (active, of this realm). */
      actingUser(id: number): Promise<{ id: number }>;
    },
  ) {}

  /** The attachment operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<AttachmentsProtocol, RealmAttachments> = {
    recordUpload: (attachments, msg) => attachments.record(msg),
    deleteAttachment: (attachments, msg) => attachments.delete(msg),
    recordThumbnails: (attachments, msg) => attachments.recordThumbnails(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  /** Zulip's create_attachment after check_upload_within_quota; the owner hears of it (notify_attachment_update). */
  private async record(msg: RecordUpload): Promise<{ id: number }> {
    const done = await this.db.selectFrom("attachments").select("id").where("path_id", "=", msg.pathId).executeTakeFirst();
    if (done) return done;
    const acting = await this.realm.actingUser(msg.actingId);
    const quotaMib = this.deps.chat.realmUploadQuotaMib;
    const used = await uploadSpaceUsed(this.db, this.realmId);
    if (quotaMib !== undefined && used + msg.size > quotaMib * 1024 * 1024) {
      throw new ChorusError("REALM_UPLOAD_QUOTA", "Upload would exceed your organization's upload quota.", 400);
    }
    const row = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const inserted = await trx
        .insertInto("attachments")
        .values({
          realm_id: this.realmId,
          owner_id: acting.id,
          path_id: msg.pathId,
          url_path: msg.urlPath,
          blob_key: msg.blobKey,
          file_name: msg.fileName,
          content_type: msg.contentType,
          size: msg.size,
          create_time: Math.floor(Date.now() / 1000),
        })
        .returning("id")
        .executeTakeFirstOrThrow();
      if (msg.image) {
        await trx
          .insertInto("image_attachments")
          .values({
            attachment_id: inserted.id,
            realm_id: this.realmId,
            path_id: msg.pathId,
            original_width_px: msg.image.width,
            original_height_px: msg.image.height,
            frames: msg.image.frames,
            content_type: msg.contentType,
          })
          .execute();
      }
      return inserted;
    });
    const [attachment] = await attachmentObjects(this.db, { ids: [row.id] });
    await this.tellOwner(acting.id, { op: "add", attachment }, used + msg.size);
    return row;
  }

  /** Zulip's remove_attachment: only the owner may; the file stops being served even where messages link it. */
  private async delete(msg: DeleteAttachment): Promise<{ blobKeys: string[] }> {
    const acting = await this.realm.actingUser(msg.actingId);
    const row = await this.db
      .selectFrom("attachments as a")
      .leftJoin("image_attachments as i", "i.attachment_id", "a.id")
      .select(["a.id", "a.blob_key", "i.thumbnail_metadata"])
      .where("a.id", "=", msg.attachmentId)
      .where("a.realm_id", "=", this.realmId)
      .where("a.owner_id", "=", acting.id)
      .executeTakeFirst();
    if (!row) throw errors.badRequest("Invalid attachment");
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("attachments").where("id", "=", row.id).execute());
    await this.tellOwner(acting.id, { op: "remove", attachment: { id: row.id } }, await uploadSpaceUsed(this.db, this.realmId));
    const thumbnails = (row.thumbnail_metadata ?? []) as StoredThumbnail[];
    return { blobKeys: [row.blob_key, ...thumbnails.map((t) => thumbnailBlobKey(row.blob_key, storedFormatName(t)))] };
  }

  /** Zulip's ensure_thumbnails, its database half: the thumbnails made, or the image record dropped. */
  private async recordThumbnails(msg: RecordThumbnails): Promise<Record<string, never>> {
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const image = trx.updateTable("image_attachments").where("attachment_id", "=", msg.attachmentId).where("realm_id", "=", this.realmId);
      if (msg.thumbnails) await image.set({ frames: msg.frames, thumbnail_metadata: JSON.stringify(msg.thumbnails) }).execute();
      else await trx.deleteFrom("image_attachments").where("attachment_id", "=", msg.attachmentId).where("realm_id", "=", this.realmId).execute();
    });
    return {};
  }

  private tellOwner(ownerId: number, change: Record<string, unknown>, uploadSpaceUsed: number): Promise<void> {
    const event = { type: "attachment", ...change, upload_space_used: uploadSpaceUsed };
    return this.deps.system().broadcast(User, [ownerId], { op: "deliverEvent", event });
  }
}
