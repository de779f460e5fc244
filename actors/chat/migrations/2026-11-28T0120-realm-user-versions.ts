import { sql, type Kysely } from "kysely";

/**
 * A version number per realm that changes whenever what POST /register's `realm_users` is made of changes: a user's
 * row (the columns of Zulip's user object), their custom profile values, their e-mail visibility setting (in the
 * user-settings snapshot). Kept by triggers, so every writer on every worker bumps it in the transaction that
 * changes the rows, and a worker that cached the realm's serialized users (actors/chat/reads/users.ts) knows with
 * one single-row read whether its copy is current (issue 28: building the list of 10,000 users took 120-140 ms of a
 * register). Idempotent (`if not exists`, `or replace`): the read migrations' test forgets and re-runs it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create table if not exists realm_user_versions (realm_id integer primary key, version bigint not null)`.execute(db);
  await sql`
    create or replace function bump_realm_user_version(realm integer) returns void language sql as $$
      insert into realm_user_versions (realm_id, version) values (realm, 1)
      on conflict (realm_id) do update set version = realm_user_versions.version + 1
    $$`.execute(db);
  await sql`
    create or replace function users_bump_realm_user_version() returns trigger language plpgsql as $$
    begin
      if tg_op = 'DELETE' then perform bump_realm_user_version(old.realm_id);
      else perform bump_realm_user_version(new.realm_id);
      end if;
      return null;
    end $$`.execute(db);
  // For the tables keyed by user: the realm of the user the row belongs to.
  await sql`
    create or replace function user_rows_bump_realm_user_version() returns trigger language plpgsql as $$
    declare
      row_user integer;
    begin
      if tg_table_name = 'actor_snapshots' then
        row_user := (case when tg_op = 'DELETE' then old.key else new.key end)::integer;
      elsif tg_op = 'DELETE' then row_user := old.user_id;
      else row_user := new.user_id;
      end if;
      perform bump_realm_user_version(realm_id) from users where id = row_user;
      return null;
    end $$`.execute(db);
  const USER_OBJECT_COLUMNS = "email, delivery_email, full_name, role, is_active, is_bot, bot_type, bot_owner_id, date_joined, timezone, avatar_version, realm_id";
  await sql`drop trigger if exists users_realm_user_version on users`.execute(db);
  await sql`
    create trigger users_realm_user_version after insert or delete or update of ${sql.raw(USER_OBJECT_COLUMNS)} on users
    for each row execute function users_bump_realm_user_version()`.execute(db);
  await sql`drop trigger if exists profile_values_realm_user_version on custom_profile_field_values`.execute(db);
  await sql`
    create trigger profile_values_realm_user_version after insert or update or delete on custom_profile_field_values
    for each row execute function user_rows_bump_realm_user_version()`.execute(db);
  // The e-mail visibility setting lives in the user-settings snapshot (actors/chat/users/settings.ts), beside
  // settings that change often: only a change of that one setting counts.
  for (const [name, when] of [
    ["settings_insert_realm_user_version", sql`after insert on actor_snapshots for each row when (new.kind = 'user-settings')`],
    ["settings_delete_realm_user_version", sql`after delete on actor_snapshots for each row when (old.kind = 'user-settings')`],
    [
      "settings_update_realm_user_version",
      sql`after update on actor_snapshots for each row when (new.kind = 'user-settings' and (old.state ->> 'email_address_visibility') is distinct from (new.state ->> 'email_address_visibility'))`,
    ],
  ] as const) {
    await sql`drop trigger if exists ${sql.id(name)} on actor_snapshots`.execute(db);
    await sql`create trigger ${sql.id(name)} ${when} execute function user_rows_bump_realm_user_version()`.execute(db);
  }
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
