import { sql, type Kysely } from "kysely";

/**
 * Zulip's custom profile fields: the organization's fields (CustomProfileField) and each user's value for them
 * (CustomProfileFieldValue). `field_data` is kept as the JSON text Zulip's API sends ("" for types without data),
 * so it goes out exactly as it came in. Deleting a field deletes its values.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("custom_profile_fields")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("hint", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("field_type", "smallint", (c) => c.notNull())
    .addColumn("field_data", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("order", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("display_in_profile_summary", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("required", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("editable_by_user", "boolean", (c) => c.notNull().defaultTo(true))
    .execute();
  // Zulip's unique_together (realm, name): labels are unique per organization, compared exactly.
  await sql`create unique index custom_profile_fields_name on custom_profile_fields (realm_id, name)`.execute(db);
  await db.schema
    .createTable("custom_profile_field_values")
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("field_id", "integer", (c) => c.notNull().references("custom_profile_fields.id").onDelete("cascade"))
    .addColumn("value", "text", (c) => c.notNull())
    .addColumn("rendered_value", "text")
    .addPrimaryKeyConstraint("custom_profile_field_values_pk", ["user_id", "field_id"])
    .execute();
  await sql`create index custom_profile_field_values_field on custom_profile_field_values (field_id)`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
