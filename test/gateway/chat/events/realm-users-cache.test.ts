/**
 * POST /register's realm_users comes from a per-realm cache (actors/chat/reads/users.ts, realm_user_versions): on
 * both engines, every change a user object is made of shows in the next register, whether it went through the API
 * or was written to the store by another process (the triggers, not this worker, tell the cache), and the viewer's
 * own entry is theirs (their real address) while the rest is shared by every viewer of their role.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("realm_users cache on %s", (engine) => {
  let server: TestServer;
  let admin: User;
  let ann: User;
  let ben: User;

  const realmUsers = async (as: User, params: Record<string, unknown> = {}) => {
    const res = await api(server, "POST", "/register", { as, params: { fetch_event_types: ["realm_user"], ...params } });
    expect(res.status).toBe(200);
    return new Map((res.body.realm_users as any[]).map((u) => [u.user_id as number, u]));
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    admin = await createUserWithRole(server, "admin@example.com", ROLE.administrator, "Ada");
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
  });
  afterAll(async () => server?.close());

  it("shows a change made through the API in the next register", async () => {
    expect((await realmUsers(ann)).get(ben.id)).toMatchObject({ full_name: "Ben" });
    expect((await api(server, "PATCH", "/settings", { as: ben, params: { full_name: "Benjamin" } })).status).toBe(200);
    expect((await realmUsers(ann)).get(ben.id)).toMatchObject({ full_name: "Benjamin" });
    const joined = await createUser(server, "cid@example.com", "Cid");
    expect((await realmUsers(ann)).get(joined.id)).toMatchObject({ full_name: "Cid", is_active: true });
    expect((await api(server, "DELETE", `/users/${joined.id}`, { as: admin, template: "/users/{user_id}" })).status).toBe(200);
    expect((await realmUsers(ann)).has(joined.id)).toBe(false);
  });

  it("shows rows written by another process (the store's triggers tell the cache, not this worker)", async () => {
    const db = server.node.store.db;
    await realmUsers(ann);
    await sql`update users set full_name = 'Benny' where id = ${ben.id}`.execute(db);
    expect((await realmUsers(ann)).get(ben.id)).toMatchObject({ full_name: "Benny" });
    const field = await api(server, "POST", "/realm/profile_fields", { as: server.owner, params: { name: "Team", field_type: 1 } });
    expect(field.status).toBe(200);
    await sql`insert into custom_profile_field_values (user_id, field_id, value) values (${ben.id}, ${field.body.id}, 'Kitchen')`.execute(db);
    expect((await realmUsers(ann)).get(ben.id)!.profile_data).toEqual({ [String(field.body.id)]: { value: "Kitchen" } });
    await sql`delete from custom_profile_field_values where user_id = ${ben.id}`.execute(db);
    expect((await realmUsers(ann)).get(ben.id)!.profile_data).toEqual({});
  });

  it("gives each viewer their own address, and the others' as their role may see them", async () => {
    // Administrators only: Ann sees her own address, and Ben's through the admin's eyes only.
    for (const who of [ann, ben]) expect((await api(server, "PATCH", "/settings", { as: who, params: { email_address_visibility: 3 } })).status).toBe(200);
    const byAnn = await realmUsers(ann);
    expect(byAnn.get(ann.id)!.delivery_email).toBe(ann.email);
    expect(byAnn.get(ben.id)!.delivery_email).toBeNull();
    const byBen = await realmUsers(ben);
    expect(byBen.get(ben.id)!.delivery_email).toBe(ben.email);
    expect(byBen.get(ann.id)!.delivery_email).toBeNull();
    const byAdmin = await realmUsers(admin);
    expect([byAdmin.get(ann.id)!.delivery_email, byAdmin.get(ben.id)!.delivery_email]).toEqual([ann.email, ben.email]);
    // The setting back to everyone, written by another process: the addresses are everyone's again.
    await sql`update actor_snapshots set state = state || '{"email_address_visibility": 1}'::jsonb where kind = 'user-settings' and key = ${String(ben.id)}`.execute(
      server.node.store.db,
    );
    expect((await realmUsers(ann)).get(ben.id)!.delivery_email).toBe(ben.email);
    // client_gravatar: the avatar URL left to the client where the address is everyone's, not otherwise.
    const withUrls = await realmUsers(ann, { client_gravatar: false });
    expect(withUrls.get(ben.id)!.avatar_url).toEqual(expect.stringContaining("gravatar"));
    expect((await realmUsers(ann, { client_gravatar: true })).get(ben.id)!.avatar_url).toBeNull();
  });
});

describe("realm_users cache with two stores in one process", () => {
  const servers: TestServer[] = [];
  afterAll(async () => Promise.all(servers.map((s) => s.close())));

  it("serves each store its own list, though their realms have the same id at the same version", async () => {
    // Two fresh organizations made alike: the same realm id, the same version after one rename each.
    for (const name of ["First", "Second"]) {
      const server = await startTestServer("embedded");
      servers.push(server);
      expect((await api(server, "PATCH", "/settings", { as: server.owner, params: { full_name: name } })).status).toBe(200);
    }
    const versions = await Promise.all(servers.map((s) => s.node.store.db.selectFrom("realm_user_versions").selectAll().execute()));
    expect(versions[1]).toEqual(versions[0]);
    for (const [i, name] of ["First", "Second"].entries()) {
      const server = servers[i]!;
      const res = await api(server, "POST", "/register", { as: server.owner, params: { fetch_event_types: ["realm_user"] } });
      expect(res.status).toBe(200);
      expect((res.body.realm_users as any[]).map((u) => u.full_name)).toContain(name);
    }
  }, 90_000); // two servers start here
});
