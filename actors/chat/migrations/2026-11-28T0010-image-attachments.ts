import { sql, type Kysely } from "kysely";

/**
 * Zulip's ImageAttachment: an uploaded file whose header read as an image Chorus thumbnails, with its size as shown
 * (orientation applied), its frame count and the thumbnails made so far (`thumbnail_metadata`, Zulip's list of
 * stored formats; empty until the background job has run). It goes with its attachment. A row whose image turns
 * out not to decode is deleted by the job, as Zulip does.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("image_attachments")
    .addColumn("attachment_id", "integer", (c) => c.primaryKey().references("attachments.id").onDelete("cascade"))
    .addColumn("realm_id", "integer", (c) => c.notNull())
    .addColumn("path_id", "text", (c) => c.notNull().unique())
    .addColumn("original_width_px", "integer", (c) => c.notNull())
    .addColumn("original_height_px", "integer", (c) => c.notNull())
    .addColumn("frames", "integer", (c) => c.notNull())
    .addColumn("content_type", "text", (c) => c.notNull())
    .addColumn("thumbnail_metadata", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
