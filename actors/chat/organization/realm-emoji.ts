/**
 * Custom (realm) emoji: uploading and deactivating them inside the realm actor, and the reads every other part
 * needs (the list, the image bytes, name lookups for reactions and markdown). Rules follow Zulip's
 * zerver/views/realm_emoji.py, zerver/actions/realm_emoji.py and zerver/lib/emoji.py.
 *
 * Images are stored in the row as uploaded (no resizing) and served by the gateway under the path Zulip's local
 * upload backend uses, `/user_avatars/{realm_id}/emoji/images/{id}.{ext}`.
 */
import type { Kysely } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { emojiCodeFor } from "../rendering/emoji.ts";
import { inGroupSetting, ROLE, type GroupSettingValue } from "./groups.ts";
import { realmSettings } from "../users/settings.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { DeactivateEmoji, RealmEmojiProtocol, UploadEmoji } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";
import { log } from "../../../runtime/log.ts";

/** Zulip's MAX_EMOJI_FILE_SIZE_MIB default. */
export const MAX_EMOJI_FILE_SIZE_MIB = 5;

/** Zulip's EmojiInfo as its API documents it (RealmEmoji in zulip.yaml). */
export interface RealmEmojiObject {
  id: string;
  name: string;
  source_url: string;
  /** Zulip serves a still frame of animated emoji; Chorus does not make one. */
  still_url: string | null;
  deactivated: boolean;
  author_id: number | null;
}

export function emojiImagePath(realmId: number, id: number, ext: string): string {
  return `/user_avatars/${realmId}/emoji/images/${id}.${ext}`;
}

/**
 * The name as Zulip stores it (surrounding spaces dropped, inner spaces become underscores), checked with Zulip's
 * rule: lowercase letters, digits, dashes and underscores, ending with a letter or digit.
 */
export function emojiNameOf(raw: string): string {
  const name = raw.trim().replaceAll(" ", "_");
  if (!name) throw errors.badRequest("Emoji name is missing");
  if (/^[0-9a-z_-]+$/.test(name)) {
    if (/[0-9a-z]$/.test(name)) return name;
    throw errors.badRequest("Emoji names must end with either a letter or digit.");
  }
  throw errors.badRequest("Emoji names must contain only lowercase English letters, digits, spaces, dashes, and underscores.");
}

export interface ImageKind {
  contentType: string;
  ext: string;
  animated: boolean;
}

/** The image types Zulip accepts for emoji that we can recognise, by content type. */
export const EMOJI_IMAGE_TYPES: Record<string, string> = { "image/png": "png", "image/gif": "gif", "image/jpeg": "jpeg", "image/webp": "webp" };

/** What the bytes are, by their magic numbers (not by what the client declared), or undefined for anything else. */
export function imageKind(data: Buffer): ImageKind | undefined {
  if (data.length >= 24 && data.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) && data.toString("latin1", 12, 16) === "IHDR") {
    // APNG: an animation control chunk before the first image data.
    const actl = data.indexOf("acTL", 8, "latin1");
    return { contentType: "image/png", ext: "png", animated: actl > 0 && actl < data.indexOf("IDAT", 8, "latin1") };
  }
  if (/^GIF8[79]a$/.test(data.toString("latin1", 0, 6))) {
    const frames = gifFrames(data);
    return frames === undefined ? undefined : { contentType: "image/gif", ext: "gif", animated: frames > 1 };
  }
  if (data.length >= 4 && data[0] === 0xff && data[1] === 0xd8 && data[2] === 0xff) return { contentType: "image/jpeg", ext: "jpeg", animated: false };
  if (data.length >= 16 && data.toString("latin1", 0, 4) === "RIFF" && data.toString("latin1", 8, 12) === "WEBP") {
    // Extended WebP (VP8X) carries an animation flag.
    const animated = data.toString("latin1", 12, 16) === "VP8X" && data.length > 20 && (data[20]! & 0x02) !== 0;
    return { contentType: "image/webp", ext: "webp", animated };
  }
  return undefined;
}

/** The number of images in a GIF, walking its blocks; undefined when the file is cut short or malformed. */
function gifFrames(data: Buffer): number | undefined {
  let pos = 13;
  if (data.length < pos) return undefined;
  if (data[10]! & 0x80) pos += 3 * 2 ** ((data[10]! & 0x07) + 1); // global colour table
  const skipSubBlocks = () => {
    while (pos < data.length && data[pos] !== 0) pos += data[pos]! + 1;
    pos++;
  };
  let frames = 0;
  while (pos < data.length) {
    const block = data[pos];
    if (block === 0x3b) return frames; // trailer
    if (block === 0x21) {
      pos += 2; // introducer, label
      skipSubBlocks();
    } else if (block === 0x2c) {
      if (pos + 10 > data.length) return undefined;
      const flags = data[pos + 9]!;
      pos += 10;
      if (flags & 0x80) pos += 3 * 2 ** ((flags & 0x07) + 1); // local colour table
      pos++; // LZW minimum code size
      skipSubBlocks();
      frames++;
    } else return undefined;
  }
  // Some encoders omit the trailer; the frames read so far are the image.
  return frames > 0 ? frames : undefined;
}

type RealmEmojiRow = { id: number; realm_id: number; name: string; author_id: number | null; deactivated: boolean; file_ext: string };

const LISTED = ["id", "realm_id", "name", "author_id", "deactivated", "file_ext"] as const;

function emojiObject(row: RealmEmojiRow): RealmEmojiObject {
  return {
    id: String(row.id),
    name: row.name,
    source_url: emojiImagePath(row.realm_id, row.id, row.file_ext),
    still_url: null,
    deactivated: row.deactivated,
    author_id: row.author_id,
  };
}

/** Every custom emoji of the realm, active and deactivated, keyed by id (GET /realm/emoji, register, the event). */
export async function realmEmojiObjects(db: Kysely<Database>, realmId: number): Promise<Record<string, RealmEmojiObject>> {
  const rows = await db.selectFrom("realm_emoji").select(LISTED).where("realm_id", "=", realmId).orderBy("id").execute();
  return Object.fromEntries(rows.map((row) => [String(row.id), emojiObject(row)]));
}

/** One emoji of the realm by id, active or not. */
export async function realmEmojiById(db: Kysely<Database>, realmId: number, id: string): Promise<RealmEmojiObject | undefined> {
  if (!/^\d{1,9}$/.test(id)) return undefined;
  const row = await db.selectFrom("realm_emoji").select(LISTED).where("realm_id", "=", realmId).where("id", "=", Number(id)).executeTakeFirst();
  return row && emojiObject(row);
}

/** The active emoji with this name (Zulip: realm emoji take precedence over unicode names). */
export async function activeRealmEmoji(db: Kysely<Database>, realmId: number, name: string): Promise<RealmEmojiObject | undefined> {
  const row = await db.selectFrom("realm_emoji").select(LISTED).where("realm_id", "=", realmId).where("name", "=", name).where("deactivated", "=", false).executeTakeFirst();
  return row && emojiObject(row);
}

/** The stored image named by `{id}.{ext}` in the realm, deactivated or not (old messages still show it). */
export async function realmEmojiImage(db: Kysely<Database>, realmId: number, fileName: string): Promise<{ contentType: string; data: Buffer } | undefined> {
  const match = /^(\d{1,9})\.([a-z]+)$/.exec(fileName);
  if (!match) return undefined;
  const row = await db
    .selectFrom("realm_emoji")
    .select(["content_type", "file_ext", "image"])
    .where("realm_id", "=", realmId)
    .where("id", "=", Number(match[1]))
    .executeTakeFirst();
  if (!row || row.file_ext !== match[2]) return undefined;
  return { contentType: row.content_type, data: Buffer.from(row.image.buffer, row.image.byteOffset, row.image.byteLength) };
}

// ---- markdown's lookup ---------------------------------------------------------------------------------------

/**
 * Active emoji by name per realm, for rendering `:name:` on the send path without a query per message. The worker
 * whose realm actor changes the emoji forgets its entry at once, and tells the other workers to (a transport
 * notice, REALM_EMOJI_CHANGED); one that misses the notice reloads within CACHE_MS. That staleness is harmless: for
 * the moment a new emoji renders as text, or a just-deactivated one still as its image (whose URL keeps working, as
 * it does for old messages).
 */
const CACHE_MS = 2000;
const activeByRealm = new Map<number, { until: number; byName: Promise<Map<string, RealmEmojiObject>> }>();

export function activeRealmEmojiByName(db: Kysely<Database>, realmId: number): Promise<Map<string, RealmEmojiObject>> {
  const hit = activeByRealm.get(realmId);
  if (hit && hit.until > Date.now()) return hit.byName;
  const byName = db
    .selectFrom("realm_emoji")
    .select(LISTED)
    .where("realm_id", "=", realmId)
    .where("deactivated", "=", false)
    .execute()
    .then((rows) => new Map(rows.map((row) => [row.name, emojiObject(row)])));
  activeByRealm.set(realmId, { until: Date.now() + CACHE_MS, byName });
  byName.catch(() => activeByRealm.delete(realmId));
  return byName;
}

function forgetRealmEmoji(realmId: number): void {
  activeByRealm.delete(realmId);
}

/** The notice (ActorSystem.announce) that a realm's emoji changed: `realm-emoji-changed:<realm id>`. */
const REALM_EMOJI_CHANGED = "realm-emoji-changed:";

/** Every worker's listener for that notice (wired in gateway/main.ts). */
export function onRealmEmojiNotice(notice: string): void {
  if (notice.startsWith(REALM_EMOJI_CHANGED)) forgetRealmEmoji(Number(notice.slice(REALM_EMOJI_CHANGED.length)));
}

// ---- changes, in the realm actor ----------------------------------------------------------------------------

export class RealmEmojiChanges {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: {
      /** The acting user as the store has them now (active, of this realm). */
      actingUser(id: number): Promise<{ id: number; role: number; is_bot: boolean }>;
      tellRealm(event: Record<string, unknown>): Promise<void>;
    },
  ) {}

  /** The emoji operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<RealmEmojiProtocol, RealmEmojiChanges> = {
    uploadEmoji: (emoji, msg) => emoji.change(msg),
    deactivateEmoji: (emoji, msg) => emoji.change(msg),
  };

  private async change(msg: UploadEmoji | DeactivateEmoji): Promise<Record<string, never>> {
    // A redelivery of a request that committed: it is done (announcing again is harmless, the event is the whole set).
    const done = await this.db.selectFrom("realm_emoji").select("id").where("realm_id", "=", this.realmId).where("last_request_key", "=", msg.requestKey).executeTakeFirst();
    if (done) {
      await this.announce();
      return {};
    }
    return msg.op === "uploadEmoji" ? this.upload(msg) : this.deactivate(msg);
  }

  private get db() {
    return this.deps.store.db;
  }

  /** Zulip's upload_emoji after the request's own checks (name, one file, size, image type: see the route). */
  private async upload(msg: UploadEmoji): Promise<Record<string, never>> {
    const acting = await this.realm.actingUser(msg.actingId);
    if (acting.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
    if (acting.is_bot) throw errors.badRequest("This endpoint does not accept bot requests.");
    const settings = await realmSettings(this.db, this.realmId);
    if (!(await inGroupSetting(this.db, settings.realm_can_add_custom_emoji_group as GroupSettingValue, acting.id))) {
      throw errors.badRequest("Insufficient permission");
    }
    if (await activeRealmEmoji(this.db, this.realmId, msg.name)) throw errors.badRequest("A custom emoji with this name already exists.");
    if (emojiCodeFor(msg.name) !== undefined && acting.role > ROLE.administrator) {
      throw errors.badRequest("Only administrators can override built-in emoji.");
    }
    const kind = msg.kind;
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("realm_emoji")
        .values({
          realm_id: this.realmId,
          name: msg.name,
          author_id: acting.id,
          content_type: kind.contentType,
          file_ext: kind.ext,
          is_animated: kind.animated,
          image: Buffer.from(msg.image, "base64"),
          date_created: Math.floor(Date.now() / 1000),
          last_request_key: msg.requestKey,
        })
        .execute(),
    );
    await this.announce();
    return {};
  }

  /** Zulip's delete_emoji: the row stays, deactivated; administrators, or the emoji's author. */
  private async deactivate(msg: DeactivateEmoji): Promise<Record<string, never>> {
    const acting = await this.realm.actingUser(msg.actingId);
    const emoji = await activeRealmEmoji(this.db, this.realmId, msg.name);
    if (!emoji) throw new ChorusError("BAD_REQUEST", `Emoji '${msg.name}' does not exist`, 404);
    if (acting.role > ROLE.administrator && emoji.author_id !== acting.id) {
      throw errors.badRequest("Must be an organization administrator or emoji author");
    }
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.updateTable("realm_emoji").set({ deactivated: true, last_request_key: msg.requestKey }).where("id", "=", Number(emoji.id)).execute(),
    );
    await this.announce();
    return {};
  }

  /** Zulip's notify_realm_emoji: everyone gets the whole set. */
  private async announce(): Promise<void> {
    forgetRealmEmoji(this.realmId);
    await this.deps
      .system()
      .announce(REALM_EMOJI_CHANGED + this.realmId)
      .catch((err) => log.error({ err }, "realm emoji: telling the other workers failed"));
    await this.realm.tellRealm({ type: "realm_emoji", op: "update", realm_emoji: await realmEmojiObjects(this.db, this.realmId) });
  }
}
