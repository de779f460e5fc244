/**
 * Custom profile fields on both engines: the organization's fields (who may change them, Zulip's checks and
 * messages), users' values per field type, where profile_data appears, the events and the POST /register state.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("custom profile fields on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let admin: User;
  let ann: User;
  let ben: User;

  /** Routes Zulip's OpenAPI description leaves out (Zulip serves them): their success is the plain envelope. */
  const undocumented = async (method: string, path: string, as: Credentials, params: Record<string, unknown>) => {
    const res = await api(server, method, path, { as, params, validate: false });
    if (res.status === 200) expect(res.body).toEqual({ result: "success", msg: "" });
    return res;
  };
  const createField = (params: Record<string, unknown>, as: Credentials = owner) => api(server, "POST", "/realm/profile_fields", { as, params });
  const updateField = (id: number, params: Record<string, unknown>, as: Credentials = owner) => undocumented("PATCH", `/realm/profile_fields/${id}`, as, params);
  const deleteField = (id: number, as: Credentials = owner) => undocumented("DELETE", `/realm/profile_fields/${id}`, as, {});
  const setOwn = (as: Credentials, data: unknown) => undocumented("PATCH", "/users/me/profile_data", as, { data });
  const removeOwn = (as: Credentials, data: number[]) => undocumented("DELETE", "/users/me/profile_data", as, { data });
  const fields = async () => (await api(server, "GET", "/realm/profile_fields", { as: ann })).body.custom_fields as any[];
  const profileOf = async (id: number) =>
    (await api(server, "GET", `/users/${id}`, { as: ann, template: "/users/{user_id}", params: { include_custom_profile_fields: true } })).body.user.profile_data;
  const msg = (res: { status: number; body: any }) => {
    expect(res.status).toBe(400);
    return res.body.msg;
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    admin = await createUserWithRole(server, "admin@example.com", 200, "Ada");
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
  });
  afterAll(async () => server?.close());

  it("lets administrators create, change, reorder and delete fields, with Zulip's checks", async () => {
    const phone = await createField({ name: " Phone ", hint: "Work number", field_type: 1 });
    expect(phone.status).toBe(200);
    const bio = await createField({ name: "Biography", field_type: 2, required: true, editable_by_user: false }, admin);
    expect(bio.status).toBe(200);
    expect(await fields()).toEqual([
      { id: phone.body.id, name: "Phone", type: 1, hint: "Work number", field_data: "", order: phone.body.id, required: false, editable_by_user: true },
      { id: bio.body.id, name: "Biography", type: 2, hint: "", field_data: "", order: bio.body.id, required: true, editable_by_user: false },
    ]);

    expect(msg(await createField({ name: "Desk", field_type: 1 }, ann))).toBe("Must be an organization administrator");
    expect(msg(await createField({ name: "Phone", field_type: 1 }))).toBe("A field with that label already exists.");
    expect(msg(await createField({ name: "  ", field_type: 1 }))).toBe("Label cannot be blank.");
    expect(msg(await createField({ name: "x".repeat(41), field_type: 1 }))).toBe("name is too long (limit: 40 characters)");
    expect(msg(await createField({ name: "Desk", hint: "h".repeat(81), field_type: 1 }))).toBe("hint is too long (limit: 80 characters)");
    expect(msg(await createField({ name: "Desk", field_type: 9 }))).toBe("Invalid field type.");
    expect((await createField({ name: "Desk" })).body).toMatchObject({ code: "REQUEST_VARIABLE_MISSING", msg: "Missing 'field_type' argument" });
    expect(msg(await createField({ name: "Team", field_type: 3, field_data: {} }))).toBe("Field must have at least one choice.");
    const twice = { a: { text: "Red", order: "1" }, b: { text: "Red", order: "2" } };
    expect(msg(await createField({ name: "Team", field_type: 3, field_data: twice }))).toBe("Field must not have duplicate choices.");
    expect(msg(await createField({ name: "Team", field_type: 3, field_data: { a: { text: "Red" } } }))).toBe("order key is missing from field_data");
    expect(msg(await createField({ name: "Essay", field_type: 2, display_in_profile_summary: true }))).toBe("Field type not supported for display in profile summary.");
    expect(msg(await createField({ name: "Site", field_type: 7, field_data: { subtype: "custom" } }))).toBe("Custom external account must define URL pattern");
    expect(msg(await createField({ name: "Site", field_type: 7, field_data: { subtype: "myspace" } }))).toBe("Invalid external account type");

    // A default external account takes its label and hint from the server.
    const github = await createField({ field_type: 7, field_data: { subtype: "github" }, display_in_profile_summary: true });
    expect(github.status).toBe(200);
    const colors = { red: { text: "Red", order: "1" }, blue: { text: "Blue", order: "2" } };
    const team = await createField({ name: "Team", field_type: 3, field_data: colors, display_in_profile_summary: true });
    expect(team.status).toBe(200);
    expect(msg(await createField({ name: "City", field_type: 1, display_in_profile_summary: true }))).toBe("Only 2 custom profile fields can be displayed in the profile summary.");
    const listed = await fields();
    expect(listed.find((f) => f.id === github.body.id)).toMatchObject({ name: "GitHub", hint: "Enter your GitHub username", field_data: '{"subtype":"github"}', display_in_profile_summary: true });
    expect(JSON.parse(listed.find((f) => f.id === team.body.id).field_data)).toEqual(colors);
    expect(msg(await updateField(github.body.id, { name: "Code" }))).toBe("Default custom field cannot be updated.");

    expect((await updateField(phone.body.id, { name: "Telephone", required: true })).status).toBe(200);
    expect((await fields()).find((f) => f.id === phone.body.id)).toMatchObject({ name: "Telephone", hint: "Work number", required: true });
    expect(msg(await updateField(phone.body.id, { name: "Biography" }))).toBe("A field with that label already exists.");
    expect(msg(await updateField(987654, { name: "Nothing" }))).toBe("Field id 987654 not found.");
    expect(msg(await updateField(phone.body.id, { name: "Tel" }, ann))).toBe("Must be an organization administrator");

    const ids = (await fields()).map((f) => f.id);
    expect(msg(await undocumented("PATCH", "/realm/profile_fields", owner, { order: ids.slice(1) }))).toBe("Invalid order mapping.");
    const reversed = [...ids].reverse();
    expect((await api(server, "PATCH", "/realm/profile_fields", { as: owner, params: { order: reversed } })).status).toBe(200);
    expect((await fields()).map((f) => [f.id, f.order])).toEqual(reversed.map((id, i) => [id, i]));

    for (const id of ids) expect((await deleteField(id)).status).toBe(200);
    expect(await fields()).toEqual([]);
    expect(msg(await deleteField(ids[0]!))).toBe(`Field id ${ids[0]} not found.`);
  });

  it("checks each user's values by the field's type and stores them, rendered where Zulip renders them", async () => {
    const id = async (params: Record<string, unknown>) => (await createField(params)).body.id as number;
    const short = await id({ name: "Nickname", field_type: 1 });
    const long = await id({ name: "About", field_type: 2 });
    const select = await id({ name: "Shirt", field_type: 3, field_data: { s: { text: "Small", order: "1" }, l: { text: "Large", order: "2" } } });
    const date = await id({ name: "Birthday", field_type: 4 });
    const link = await id({ name: "Website", field_type: 5 });
    const people = await id({ name: "Mentor", field_type: 6 });
    const pronouns = await id({ name: "Pronouns", field_type: 8 });
    const locked = await id({ name: "Badge", field_type: 1, editable_by_user: false });

    expect(msg(await setOwn(ann, [{ id: short, value: "n".repeat(51) }]))).toBe("Nickname is too long (limit: 50 characters)");
    expect(msg(await setOwn(ann, [{ id: long, value: "a".repeat(501) }]))).toBe("About is too long (limit: 500 characters)");
    expect(msg(await setOwn(ann, [{ id: select, value: "xl" }]))).toBe("'xl' is not a valid choice for 'Shirt'.");
    expect(msg(await setOwn(ann, [{ id: date, value: "2026-02-30" }]))).toBe("Birthday is not a date");
    expect(msg(await setOwn(ann, [{ id: date, value: "1 May 2000" }]))).toBe("Birthday is not a date");
    expect(msg(await setOwn(ann, [{ id: link, value: "not a link" }]))).toBe("Website is not a URL");
    expect(msg(await setOwn(ann, [{ id: people, value: [987654] }]))).toBe("Invalid user ID: 987654");
    expect(msg(await setOwn(ann, [{ id: people, value: "Ben" }]))).toBe("User IDs is not a list");
    expect(msg(await setOwn(ann, [{ id: short, value: [ben.id] }]))).toBe("Nickname is not a string");
    expect(msg(await setOwn(ann, [{ id: 987654, value: "x" }]))).toBe("Field id 987654 not found.");
    expect(msg(await setOwn(ann, [{ id: locked, value: "Gold" }]))).toBe("You are not allowed to change this field. Contact an administrator to update it.");
    expect((await setOwn(ann, [{ id: short }])).body.code).toBe("REQUEST_VARIABLE_MISSING");
    // A refused entry leaves the whole request undone.
    expect(msg(await setOwn(ann, [{ id: short, value: "Annie" }, { id: date, value: "yesterday" }]))).toBe("Birthday is not a date");
    expect(await profileOf(ann.id)).toEqual({});

    const values = [
      { id: short, value: "**Annie**" },
      { id: long, value: "Likes *tea*" },
      { id: select, value: "l" },
      { id: date, value: "2000-05-01" },
      { id: link, value: "https://ann.example.com/" },
      { id: people, value: [ben.id] },
      { id: pronouns, value: "she/her" },
    ];
    expect((await setOwn(ann, values)).status).toBe(200);
    expect(await profileOf(ann.id)).toEqual({
      [short]: { value: "**Annie**", rendered_value: "<p><strong>Annie</strong></p>" },
      [long]: { value: "Likes *tea*", rendered_value: "<p>Likes <em>tea</em></p>" },
      [select]: { value: "l" },
      [date]: { value: "2000-05-01" },
      [link]: { value: "https://ann.example.com/" },
      [people]: { value: `[${ben.id}]` },
      [pronouns]: { value: "she/her" },
    });

    // Administrators set anyone's values, locked fields included; an empty value removes one.
    const patchUser = (as: Credentials, params: Record<string, unknown>) => api(server, "PATCH", `/users/${ann.id}`, { as, template: "/users/{user_id}", params });
    expect((await patchUser(admin, { profile_data: [{ id: locked, value: "Gold" }, { id: pronouns, value: "" }] })).status).toBe(200);
    expect(msg(await patchUser(ben, { profile_data: [{ id: locked, value: "Tin" }] }))).toBe("Insufficient permission");
    expect(msg(await patchUser(admin, { profile_data: [{ id: date, value: "soon" }] }))).toBe("Birthday is not a date");
    const after = await profileOf(ann.id);
    expect(after[locked]).toEqual({ value: "Gold", rendered_value: "<p>Gold</p>" });
    expect(after[pronouns]).toBeUndefined();

    expect(msg(await removeOwn(ann, [locked]))).toBe("You are not allowed to change this field. Contact an administrator to update it.");
    expect((await removeOwn(ann, [short, long])).status).toBe(200);
    expect(Object.keys(await profileOf(ann.id)).map(Number).sort((a, b) => a - b)).toEqual([select, date, link, people, locked].sort((a, b) => a - b));

    // Options taken away from a list take the values that chose them; deleting a field takes its values.
    expect((await updateField(select, { field_data: { s: { text: "Small", order: "1" } } })).status).toBe(200);
    expect((await profileOf(ann.id))[select]).toBeUndefined();
    expect((await deleteField(date)).status).toBe(200);
    expect((await profileOf(ann.id))[date]).toBeUndefined();
    for (const f of await fields()) await deleteField(f.id);
  });

  it("shows profile_data where Zulip does: asked for on GET /users and /users/{id}, always on /users/me and /register", async () => {
    const field = (await createField({ name: "Room", field_type: 1 })).body.id as number;
    expect((await setOwn(ben, [{ id: field, value: "B12" }])).status).toBe(200);
    const expected = { [field]: { value: "B12", rendered_value: "<p>B12</p>" } };

    const plain = await api(server, "GET", `/users/${ben.id}`, { as: ann, template: "/users/{user_id}" });
    expect(plain.body.user).not.toHaveProperty("profile_data");
    expect(await profileOf(ben.id)).toEqual(expected);

    const members = async (params: Record<string, unknown>) => (await api(server, "GET", "/users", { as: ann, params })).body.members as any[];
    expect((await members({})).every((m) => !("profile_data" in m))).toBe(true);
    const withData = await members({ include_custom_profile_fields: true });
    expect(withData.find((m) => m.user_id === ben.id).profile_data).toEqual(expected);
    expect(withData.find((m) => m.user_id === ann.id).profile_data).toEqual({});

    expect((await api(server, "GET", "/users/me", { as: ben })).body.profile_data).toEqual(expected);
    const registered = await api(server, "POST", "/register", { as: ann, params: { fetch_event_types: ["realm_user", "custom_profile_fields"] } });
    expect(registered.body.realm_users.find((u: any) => u.user_id === ben.id).profile_data).toEqual(expected);
    expect(registered.body.custom_profile_fields).toEqual([expect.objectContaining({ id: field, name: "Room", type: 1 })]);
    expect(registered.body.custom_profile_field_types).toMatchObject({
      SHORT_TEXT: { id: 1, name: "Text (short)" },
      SELECT: { id: 3, name: "List of options" },
      USER: { id: 6, name: "Users" },
      PRONOUNS: { id: 8, name: "Pronouns" },
    });
    await deleteField(field);
  });

  it("tells the organization about field changes and each changed value", async () => {
    const annQueue = await openQueue(server, ann, ["custom_profile_fields", "realm_user"]);
    const benQueue = await openQueue(server, ben, ["custom_profile_fields", "realm_user"]);
    const field = (await createField({ name: "Motto", field_type: 2 })).body.id as number;
    expect((await setOwn(ann, [{ id: field, value: "Carpe *diem*" }])).status).toBe(200);
    // An unchanged value is no change.
    expect((await setOwn(ann, [{ id: field, value: "Carpe *diem*" }])).status).toBe(200);
    expect((await removeOwn(ann, [field])).status).toBe(200);
    expect((await deleteField(field)).status).toBe(200);

    const motto = { id: field, name: "Motto", type: 2, hint: "", field_data: "", order: field, required: false, editable_by_user: true };
    for (const queue of [annQueue, benQueue]) {
      expect(await queue.events()).toEqual([
        { type: "custom_profile_fields", fields: [motto] },
        { type: "realm_user", op: "update", person: { user_id: ann.id, custom_profile_field: { id: field, value: "Carpe *diem*", rendered_value: "<p>Carpe <em>diem</em></p>" } } },
        { type: "realm_user", op: "update", person: { user_id: ann.id, custom_profile_field: { id: field, value: null } } },
        { type: "custom_profile_fields", fields: [] },
      ]);
    }
  });
});
