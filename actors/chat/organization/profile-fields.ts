/**
 * Custom profile fields, inside the realm actor that serialises the organization's changes: administrators define
 * the fields; each user fills in their values (administrators may fill in anyone's). Rules, limits and messages
 * follow Zulip's zerver/views/custom_profile_fields.py, zerver/actions/custom_profile_fields.py,
 * zerver/models/custom_profile_fields.py and the validators of zerver/lib/validator.py.
 *
 * Events: every change to the fields sends the whole list (`custom_profile_fields`) to the realm; every changed
 * value sends `realm_user` update with `custom_profile_field` {id, value, rendered_value?} (value null: removed).
 */
import { sql, type Kysely, type Selectable, type SqlBool, type Transaction } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { CustomProfileFieldTable } from "../schema.ts";
import type { ActorDeps } from "../../deps.ts";
import { ROLE } from "./groups.ts";
import { renderMarkdown } from "../rendering/message-format.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { CreateProfileField, ProfileDataEntry, ProfileFieldsProtocol, UpdateProfileField } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database> | Transaction<Database>;
type FieldRow = Selectable<CustomProfileFieldTable>;

export const FIELD_TYPE = { SHORT_TEXT: 1, LONG_TEXT: 2, SELECT: 3, DATE: 4, URL: 5, USER: 6, EXTERNAL_ACCOUNT: 7, PRONOUNS: 8 } as const;

/** Zulip's `custom_profile_field_types` of POST /register: each type's keyword, id and display name. */
export const CUSTOM_PROFILE_FIELD_TYPES: Record<string, { id: number; name: string }> = {
  SHORT_TEXT: { id: FIELD_TYPE.SHORT_TEXT, name: "Text (short)" },
  LONG_TEXT: { id: FIELD_TYPE.LONG_TEXT, name: "Text (long)" },
  SELECT: { id: FIELD_TYPE.SELECT, name: "List of options" },
  DATE: { id: FIELD_TYPE.DATE, name: "Date" },
  URL: { id: FIELD_TYPE.URL, name: "Link" },
  USER: { id: FIELD_TYPE.USER, name: "Users" },
  EXTERNAL_ACCOUNT: { id: FIELD_TYPE.EXTERNAL_ACCOUNT, name: "External account" },
  PRONOUNS: { id: FIELD_TYPE.PRONOUNS, name: "Pronouns" },
};

const NAME_MAX_LENGTH = 40;
const HINT_MAX_LENGTH = 80;
const SHORT_VALUE_MAX_LENGTH = 50;
const LONG_VALUE_MAX_LENGTH = 500;
const MAX_PROFILE_SUMMARY_FIELDS = 2;

/** Zulip's DEFAULT_EXTERNAL_ACCOUNTS: subtypes whose label and hint come from the server. */
const DEFAULT_EXTERNAL_ACCOUNTS: Record<string, { name: string; hint: string }> = {
  github: { name: "GitHub", hint: "Enter your GitHub username" },
  twitter: { name: "X", hint: "Enter your X username" },
};

/** Zulip's is_renderable: the text types keep a Markdown rendering of their value. */
function renderable(fieldType: number): boolean {
  return fieldType === FIELD_TYPE.SHORT_TEXT || fieldType === FIELD_TYPE.LONG_TEXT;
}

/** Zulip's CustomProfileField.as_dict; display_in_profile_summary only when true. */
export function profileFieldObject(f: FieldRow) {
  return {
    id: f.id,
    name: f.name,
    type: f.field_type,
    hint: f.hint,
    field_data: f.field_data,
    order: f.order,
    required: f.required,
    editable_by_user: f.editable_by_user,
    ...(f.display_in_profile_summary ? { display_in_profile_summary: true } : {}),
  };
}

function fieldRows(db: DB, realmId: number) {
  return db.selectFrom("custom_profile_fields").selectAll().where("realm_id", "=", realmId).orderBy("order").orderBy("id").execute();
}

/** The organization's fields, in display order (GET /realm/profile_fields, /register, events). */
export async function profileFieldObjects(db: DB, realmId: number) {
  return (await fieldRows(db, realmId)).map(profileFieldObject);
}

export interface ProfileValue {
  value: string;
  rendered_value?: string;
}

/** Users' values keyed by user id, then by field id (as text, as Zulip's profile_data keys are). */
export async function profileDataOf(db: DB, userIds: number[]): Promise<Map<number, Record<string, ProfileValue>>> {
  const out = new Map<number, Record<string, ProfileValue>>();
  if (!userIds.length) return out;
  const rows = await db
    .selectFrom("custom_profile_field_values")
    .select(["user_id", "field_id", "value", "rendered_value"])
    .where(sql<SqlBool>`user_id = any(${sql.val(userIds)}::int[])`)
    .orderBy("field_id")
    .execute();
  for (const r of rows) {
    const data = out.get(r.user_id) ?? {};
    data[String(r.field_id)] = r.rendered_value === null ? { value: r.value } : { value: r.value, rendered_value: r.rendered_value };
    out.set(r.user_id, data);
  }
  return out;
}

// ---- checks on what administrators send ------------------------------------------------------------------------

/** Zulip's check_capped_string. */
function checkLength(label: string, value: string, limit: number): void {
  if (value.length > limit) throw errors.badRequest(`${label} is too long (limit: ${limit} characters)`);
}

function checkNameAndHint(name: string, hint: string): void {
  if (!name.trim()) throw errors.badRequest("Label cannot be blank.");
  checkLength("hint", hint, HINT_MAX_LENGTH);
  checkLength("name", name, NAME_MAX_LENGTH);
}

/** Zulip's check_profile_field_data: an object whose values are strings or objects of strings. */
function checkFieldDataShape(data: Record<string, unknown>): void {
  for (const value of Object.values(data)) {
    const ok = typeof value === "string" || (isPlainObject(value) && Object.values(value).every((v) => typeof v === "string"));
    if (!ok) throw errors.badRequest("field_data contains a value that is not an allowed_type");
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Zulip's validate_select_field_data: at least one choice, each {text, order} non-blank, no two alike. */
function checkSelectOptions(data: Record<string, unknown>): void {
  const options = Object.entries(data);
  if (!options.length) throw errors.badRequest("Field must have at least one choice.");
  const texts = new Set<string>();
  for (const [key, option] of options) {
    if (!key.trim()) throw errors.badRequest("'value' cannot be blank.");
    if (!isPlainObject(option)) throw errors.badRequest("field_data is not a dict");
    for (const part of ["text", "order"]) {
      if (!(part in option)) throw errors.badRequest(`${part} key is missing from field_data`);
      if (!String(option[part]).trim()) throw errors.badRequest(`field_data["${part}"] cannot be blank.`);
    }
    const extra = Object.keys(option).filter((k) => k !== "text" && k !== "order");
    if (extra.length) throw errors.badRequest(`Unexpected arguments: ${extra.join(", ")}`);
    texts.add(String(option.text));
  }
  if (texts.size !== options.length) throw errors.badRequest("Field must not have duplicate choices.");
}

/** Zulip's validate_external_account_field_data. */
function checkExternalAccount(data: Record<string, unknown>): void {
  const subtype = data.subtype;
  if (typeof subtype !== "string" || !subtype.trim()) throw errors.badRequest(subtype === undefined ? "subtype key is missing from field_data" : 'field_data["subtype"] cannot be blank.');
  const extra = Object.keys(data).filter((k) => k !== "subtype" && k !== "url_pattern");
  if (extra.length) throw errors.badRequest(`Unexpected arguments: ${extra.join(", ")}`);
  if (data.url_pattern !== undefined) {
    const pattern = String(data.url_pattern);
    if (pattern.split("%(username)s").length !== 2) throw errors.badRequest("URL pattern must contain '%(username)s'.");
    if (!isUrl(pattern.replace("%(username)s", "username"))) throw errors.badRequest('field_data["url_pattern"] is not a URL');
  }
  if (subtype in DEFAULT_EXTERNAL_ACCOUNTS) return;
  if (subtype !== "custom") throw errors.badRequest("Invalid external account type");
  if (data.url_pattern === undefined) throw errors.badRequest("Custom external account must define URL pattern");
}

/** Zulip's validate_custom_profile_field. */
function checkField(name: string, hint: string, fieldType: number, data: Record<string, unknown>, inSummary: boolean): void {
  if (fieldType === FIELD_TYPE.SELECT) checkSelectOptions(data);
  else if (fieldType === FIELD_TYPE.EXTERNAL_ACCOUNT) checkExternalAccount(data);
  if (!isDefaultExternalAccount(fieldType, data)) checkNameAndHint(name, hint);
  if (!Object.values(FIELD_TYPE).includes(fieldType as never)) throw errors.badRequest("Invalid field type.");
  // Long text does not fit a summary; Zulip's clients cannot show users there yet.
  if (inSummary && (fieldType === FIELD_TYPE.LONG_TEXT || fieldType === FIELD_TYPE.USER)) throw errors.badRequest("Field type not supported for display in profile summary.");
}

function isDefaultExternalAccount(fieldType: number, data: Record<string, unknown>): boolean {
  return fieldType === FIELD_TYPE.EXTERNAL_ACCOUNT && data.subtype !== "custom";
}

/** Only list and external-account fields keep field_data; the others keep "". */
function storedFieldData(fieldType: number, data: Record<string, unknown>): string {
  return fieldType === FIELD_TYPE.SELECT || fieldType === FIELD_TYPE.EXTERNAL_ACCOUNT ? JSON.stringify(data) : "";
}

// ---- checks on users' values -----------------------------------------------------------------------------------

/** Django's URLValidator, closely enough: an http(s)/ftp(s) URL with a host name. */
function isUrl(text: string): boolean {
  if (/\s/.test(text)) return false;
  try {
    const url = new URL(text);
    return ["http:", "https:", "ftp:", "ftps:"].includes(url.protocol) && (url.hostname.includes(".") || url.hostname === "localhost");
  } catch {
    return false;
  }
}

/** Zulip's check_date: exactly YYYY-MM-DD, and a real day. */
function isDate(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) return false;
  const day = new Date(`${text}T00:00:00Z`);
  return !Number.isNaN(day.getTime()) && day.toISOString().slice(0, 10) === text;
}

/**
 * A user's value for a field, checked as Zulip's validate_user_custom_profile_field does (the field's label names
 * the value in messages), as the text the store keeps: a users field keeps its ids as a JSON list.
 */
async function checkedValue(db: DB, realmId: number, field: FieldRow, value: string | number[]): Promise<string> {
  const label = field.name;
  if (field.field_type === FIELD_TYPE.USER) {
    if (!Array.isArray(value)) throw errors.badRequest("User IDs is not a list");
    const ids = [...new Set(value)];
    const users = ids.length ? await db.selectFrom("users").select(["id", "is_active", "is_bot"]).where("realm_id", "=", realmId).where("id", "in", ids).execute() : [];
    const found = new Map(users.map((u) => [u.id, u]));
    for (const id of ids) {
      const user = found.get(id);
      if (!user) throw errors.badRequest(`Invalid user ID: ${id}`);
      if (!user.is_active) throw errors.badRequest(`User with ID ${id} is deactivated`);
      if (user.is_bot) throw errors.badRequest(`User with ID ${id} is a bot`);
    }
    return JSON.stringify(value);
  }
  if (typeof value !== "string") throw errors.badRequest(`${label} is not a string`);
  switch (field.field_type) {
    case FIELD_TYPE.LONG_TEXT:
      checkLength(label, value, LONG_VALUE_MAX_LENGTH);
      break;
    case FIELD_TYPE.DATE:
      if (!isDate(value)) throw errors.badRequest(`${label} is not a date`);
      break;
    case FIELD_TYPE.URL:
      if (!isUrl(value)) throw errors.badRequest(`${label} is not a URL`);
      break;
    case FIELD_TYPE.SELECT: {
      const options = JSON.parse(field.field_data || "{}") as Record<string, unknown>;
      if (!Object.hasOwn(options, value)) throw errors.badRequest(`'${value}' is not a valid choice for '${label}'.`);
      break;
    }
    default:
      // Short text, external account and pronouns: Zulip's check_short_string.
      checkLength(label, value, SHORT_VALUE_MAX_LENGTH);
  }
  return value;
}

// ---- the realm actor's part -----------------------------------------------------------------------------------

export class ProfileFields {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly hooks: { tellRealm(event: Record<string, unknown>): Promise<void> },
  ) {}

  private get db() {
    return this.deps.store.db;
  }

  /** The profile field operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<ProfileFieldsProtocol, ProfileFields> = {
    createProfileField: (fields, msg) => fields.create(msg),
    updateProfileField: (fields, msg) => fields.update(msg),
    reorderProfileFields: (fields, msg) => fields.reorder(msg.actingId, msg.order),
    deleteProfileField: (fields, msg) => fields.remove(msg.actingId, msg.fieldId),
    setProfileData: (fields, msg) => fields.setProfileData(msg.actingId, msg.userId, msg.data),
    removeProfileData: (fields, msg) => fields.setProfileData(msg.actingId, msg.userId, msg.fieldIds.map((id) => ({ id, value: null }))),
  };

  /** The acting user, active and in this realm; `admin`: Zulip's require_realm_admin. */
  private async acting(id: number, admin: boolean) {
    const user = await this.db.selectFrom("users").select(["id", "role", "is_active", "is_bot"]).where("id", "=", id).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!user?.is_active) throw errors.badRequest("Account is deactivated");
    if (admin && user.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
    return user;
  }

  private async field(id: number): Promise<FieldRow> {
    const field = await this.db.selectFrom("custom_profile_fields").selectAll().where("id", "=", id).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!field) throw errors.badRequest(`Field id ${id} not found.`);
    return field;
  }

  private async checkSummaryLimit(exceptId?: number): Promise<void> {
    let q = this.db.selectFrom("custom_profile_fields").select("id").where("realm_id", "=", this.realmId).where("display_in_profile_summary", "=", true);
    if (exceptId !== undefined) q = q.where("id", "!=", exceptId);
    if ((await q.execute()).length >= MAX_PROFILE_SUMMARY_FIELDS) throw errors.badRequest(`Only ${MAX_PROFILE_SUMMARY_FIELDS} custom profile fields can be displayed in the profile summary.`);
  }

  /** Labels are unique in the organization (Zulip's unique_together on realm and name). */
  private async checkLabelFree(name: string, exceptId?: number): Promise<void> {
    let q = this.db.selectFrom("custom_profile_fields").select("id").where("realm_id", "=", this.realmId).where("name", "=", name);
    if (exceptId !== undefined) q = q.where("id", "!=", exceptId);
    if (await q.executeTakeFirst()) throw errors.badRequest("A field with that label already exists.");
  }

  private async announceFields(): Promise<void> {
    await this.hooks.tellRealm({ type: "custom_profile_fields", fields: await profileFieldObjects(this.db, this.realmId) });
  }

  private async create(msg: CreateProfileField): Promise<{ id: number }> {
    await this.acting(msg.actingId, true);
    const data = msg.fieldData ?? {};
    checkFieldDataShape(data);
    if (msg.displayInProfileSummary) await this.checkSummaryLimit();
    let name = msg.name.trim();
    let hint = msg.hint;
    checkField(name, hint, msg.fieldType, data, msg.displayInProfileSummary);
    if (isDefaultExternalAccount(msg.fieldType, data)) ({ name, hint } = DEFAULT_EXTERNAL_ACCOUNTS[String(data.subtype)]!);
    await this.checkLabelFree(name);
    const id = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const row = await trx
        .insertInto("custom_profile_fields")
        .values({
          realm_id: this.realmId,
          name,
          hint,
          field_type: msg.fieldType,
          field_data: storedFieldData(msg.fieldType, data),
          display_in_profile_summary: msg.displayInProfileSummary,
          required: msg.required,
          editable_by_user: msg.editableByUser,
        })
        .returning("id")
        .executeTakeFirstOrThrow();
      // As Zulip does: a new field goes last, its order being its id.
      await trx.updateTable("custom_profile_fields").set({ order: row.id }).where("id", "=", row.id).execute();
      return row.id;
    });
    await this.announceFields();
    return { id };
  }

  private async update(msg: UpdateProfileField): Promise<Record<string, never>> {
    await this.acting(msg.actingId, true);
    const field = await this.field(msg.fieldId);
    if (msg.displayInProfileSummary) await this.checkSummaryLimit(field.id);
    if (msg.fieldData !== undefined) checkFieldDataShape(msg.fieldData);
    const storedData = (field.field_data ? JSON.parse(field.field_data) : {}) as Record<string, unknown>;
    const name = msg.name?.trim() ?? field.name;
    const hint = msg.hint ?? field.hint;
    const data = msg.fieldData ?? storedData;
    if (isDefaultExternalAccount(field.field_type, storedData)) {
      // Zulip: a default external account keeps its label, hint and subtype; only the other flags change.
      const same = name === field.name && hint === field.hint && JSON.stringify(data) === JSON.stringify(storedData);
      if (!same) throw errors.badRequest("Default custom field cannot be updated.");
    }
    const inSummary = msg.displayInProfileSummary ?? field.display_in_profile_summary;
    checkField(name, hint, field.field_type, data, inSummary);
    if (name !== field.name) await this.checkLabelFree(name, field.id);
    // Options taken away from a list take the users' values that chose them along.
    const removedOptions =
      field.field_type === FIELD_TYPE.SELECT && msg.fieldData !== undefined ? Object.keys(storedData).filter((k) => !Object.hasOwn(data, k)) : [];
    const cleared = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx
        .updateTable("custom_profile_fields")
        .set({
          name,
          hint,
          field_data: storedFieldData(field.field_type, data),
          display_in_profile_summary: inSummary,
          required: msg.required ?? field.required,
          editable_by_user: msg.editableByUser ?? field.editable_by_user,
        })
        .where("id", "=", field.id)
        .execute();
      if (!removedOptions.length) return [];
      return trx.deleteFrom("custom_profile_field_values").where("field_id", "=", field.id).where("value", "in", removedOptions).returning("user_id").execute();
    });
    for (const { user_id } of cleared) await this.announceValue(user_id, field.id, null, null);
    await this.announceFields();
    return {};
  }

  /** Zulip's try_reorder_realm_custom_profile_fields: every field must be named; the list's positions become orders. */
  private async reorder(actingId: number, order: number[]): Promise<Record<string, never>> {
    await this.acting(actingId, true);
    const fields = await fieldRows(this.db, this.realmId);
    const position = new Map(order.map((id, i) => [id, i]));
    if (fields.some((f) => !position.has(f.id))) throw errors.badRequest("Invalid order mapping.");
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      for (const f of fields) await trx.updateTable("custom_profile_fields").set({ order: position.get(f.id)! }).where("id", "=", f.id).execute();
    });
    await this.announceFields();
    return {};
  }

  private async remove(actingId: number, fieldId: number): Promise<Record<string, never>> {
    await this.acting(actingId, true);
    const field = await this.field(fieldId);
    // The values go with the field (on delete cascade).
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("custom_profile_fields").where("id", "=", field.id).execute());
    await this.announceFields();
    return {};
  }

  /**
   * Set (or, value null, remove) a user's values, all checked before any is written. Users change their own
   * values of fields editable by users; administrators change anyone's. Unchanged values send no event.
   */
  /** Also the realm actor's, for an administrator's PATCH /users/{user_id} with profile_data. */
  async setProfileData(actingId: number, userId: number, data: ProfileDataEntry[]): Promise<Record<string, never>> {
    const acting = await this.acting(actingId, actingId !== userId);
    if (acting.is_bot && actingId === userId) throw errors.badRequest("This endpoint does not accept bot requests.");
    const target = await this.db.selectFrom("users").select(["id", "is_bot"]).where("id", "=", userId).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!target) throw errors.badRequest("No such user");
    const isAdmin = acting.role <= ROLE.administrator;
    const current = await this.db.selectFrom("custom_profile_field_values").select(["field_id", "value"]).where("user_id", "=", userId).execute();
    const currentValue = new Map(current.map((v) => [v.field_id, v.value]));
    const changes: Array<{ field: FieldRow; value: string | null }> = [];
    for (const entry of data) {
      const field = await this.field(entry.id);
      if (!isAdmin && !field.editable_by_user) throw errors.badRequest("You are not allowed to change this field. Contact an administrator to update it.");
      const value = entry.value === null ? null : await checkedValue(this.db, this.realmId, field, entry.value);
      if (value === (currentValue.get(field.id) ?? null)) continue;
      changes.push({ field, value });
      currentValue.set(field.id, value as string);
    }
    if (!changes.length) return {};
    const written = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const out: Array<{ fieldId: number; value: string | null; rendered: string | null }> = [];
      for (const { field, value } of changes) {
        if (value === null) {
          await trx.deleteFrom("custom_profile_field_values").where("user_id", "=", userId).where("field_id", "=", field.id).execute();
          out.push({ fieldId: field.id, value: null, rendered: null });
          continue;
        }
        const rendered = renderable(field.field_type) ? renderMarkdown(value) : null;
        await trx
          .insertInto("custom_profile_field_values")
          .values({ user_id: userId, field_id: field.id, value, rendered_value: rendered })
          .onConflict((c) => c.columns(["user_id", "field_id"]).doUpdateSet({ value, rendered_value: rendered }))
          .execute();
        out.push({ fieldId: field.id, value, rendered });
      }
      return out;
    });
    for (const w of written) await this.announceValue(userId, w.fieldId, w.value, w.rendered);
    return {};
  }

  /** Zulip's notify_user_update_custom_profile_data: rendered_value only when there is one. */
  private announceValue(userId: number, fieldId: number, value: string | null, rendered: string | null): Promise<void> {
    const change = { id: fieldId, value, ...(rendered ? { rendered_value: rendered } : {}) };
    return this.hooks.tellRealm({ type: "realm_user", op: "update", person: { user_id: userId, custom_profile_field: change } });
  }
}
