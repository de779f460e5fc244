/**
 * Widget messages and POST /submessage (Zulip's zerver/lib/widget.py, zerver/views/submessage.py), through a real
 * server on both engines: a `/poll` or `/todo` message carries its widget as its first submessage, in its event and
 * in GET /messages; readers add votes, options and tasks, checked as Zulip checks them, and everyone who has the
 * message hears of each in a `submessage` event. Events and error answers are checked against Zulip's OpenAPI
 * description; POST /submessage itself is not in it (Zulip documents it nowhere), so its success is checked here.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";

describe.each(ENGINES)("widget messages and submessages on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  const { toChannel, get, patch, register, events, subscribe } = messageApi(() => server);

  const submessage = (as: Credentials, message_id: number, content: unknown, msg_type = "widget") =>
    api(server, "POST", "/submessage", {
      as,
      params: { message_id, msg_type, content: typeof content === "string" ? content : JSON.stringify(content) },
      validate: false,
    });
  const added = async (as: Credentials, message_id: number, content: unknown) => {
    const res = await submessage(as, message_id, content);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({ result: "success", msg: "" });
  };
  const refused = async (as: Credentials, message_id: number, content: unknown, msg: string) => {
    const res = await api(server, "POST", "/submessage", {
      as,
      params: { message_id, msg_type: "widget", content: typeof content === "string" ? content : JSON.stringify(content) },
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ result: "error", code: "BAD_REQUEST", msg });
  };
  const submessagesIn = async (as: Credentials, id: number) =>
    (await get(as, { anchor: id, num_before: 0, num_after: 0 })).body.messages[0].submessages as Array<Record<string, unknown>>;

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    await subscribe(server.owner, ["general"], { principals: [alice.id, bob.id, carol.id] });
    await subscribe(alice, ["secret"], { principals: [alice.id, bob.id], invite_only: true });
  });
  afterAll(async () => server?.close());

  it("makes a poll of a /poll message, takes votes and options, and tells everyone who has it", async () => {
    const bobQueue = await register(bob, ["message", "submessage"]);
    const aliceQueue = await register(alice, ["submessage"]);
    const id = await toChannel(alice, "lunch", "/poll Lunch?\nPizza\n- Sushi\n\n");
    const widget = {
      msg_type: "widget",
      content: '{"widget_type": "poll", "extra_data": {"question": "Lunch?", "options": ["Pizza", "Sushi"]}}',
      message_id: id,
      sender_id: alice.id,
      id: expect.any(Number),
    };
    const [event] = (await events(bob, bobQueue)).filter((e) => e.type === "message");
    expect(event.message.submessages).toEqual([widget]);
    expect(await submessagesIn(bob, id)).toEqual([widget]);

    const vote = { type: "vote", key: "canned,1", vote: 1 };
    await added(bob, id, vote);
    await added(bob, id, { type: "new_option", option: "Tacos", idx: 1 });
    await added(alice, id, { type: "question", question: "Lunch today?" });
    const told = (await events(alice, aliceQueue)).filter((e) => e.type === "submessage");
    expect(told.map(({ id: _event, submessage_id: _sub, ...rest }) => rest)).toEqual([
      { type: "submessage", msg_type: "widget", message_id: id, sender_id: bob.id, content: JSON.stringify(vote) },
      { type: "submessage", msg_type: "widget", message_id: id, sender_id: bob.id, content: '{"type":"new_option","option":"Tacos","idx":1}' },
      { type: "submessage", msg_type: "widget", message_id: id, sender_id: alice.id, content: '{"type":"question","question":"Lunch today?"}' },
    ]);
    expect((await events(bob, bobQueue)).filter((e) => e.type === "submessage")).toEqual(told.map((e) => expect.objectContaining({ submessage_id: e.submessage_id })));

    // A fetch shows them all in order: the page read before the votes is not served again.
    const listed = await submessagesIn(carol, id);
    expect(listed.map((s) => s.id)).toEqual([listed[0]!.id, ...told.map((e) => e.submessage_id)]);
    expect(listed.map((s) => s.sender_id)).toEqual([alice.id, bob.id, bob.id, alice.id]);
    const single = await api(server, "GET", `/messages/${id}`, { as: bob, template: "/messages/{message_id}" });
    expect(single.body.message.submessages).toEqual(listed);
  });

  it("refuses what a poll does not take, with Zulip's messages", async () => {
    const id = await toChannel(alice, "lunch", "/poll Dinner?");
    await refused(bob, id, { type: "question", question: "mine now" }, "You can't edit a question unless you are the author.");
    await refused(bob, id, { type: "vote", key: "canned,0", vote: 2 }, 'Invalid poll data["vote"]');
    await refused(bob, id, { type: "vote", key: "canned,0" }, 'poll data["vote"] is missing');
    await refused(bob, id, { type: "vote", key: 3, vote: 1 }, 'poll data["key"] is not a string');
    await refused(bob, id, { type: "vote", key: "canned,0", vote: 1, extra: true }, "Unexpected arguments: extra");
    await refused(bob, id, { type: "new_option", option: "Soup", idx: 1001 }, 'poll data["idx"] is too large');
    await refused(bob, id, { type: "nope" }, "Unknown type for poll data: nope");
    await refused(bob, id, [1, 2], "poll data is not a dict");
    await refused(bob, id, "{not json", "Invalid json for submessage");
    expect(await submessagesIn(bob, id)).toHaveLength(1); // the widget alone
  });

  it("makes a todo list of a /todo message and checks its tasks", async () => {
    const id = await toChannel(alice, "chores", "/todo Groceries\n- milk: 2 litres\n* bread");
    expect(await submessagesIn(bob, id)).toEqual([
      {
        msg_type: "widget",
        content: '{"widget_type": "todo", "extra_data": {"task_list_title": "Groceries", "tasks": [{"task": "milk", "desc": "2 litres"}, {"task": "bread", "desc": ""}]}}',
        message_id: id,
        sender_id: alice.id,
        id: expect.any(Number),
      },
    ]);
    await added(bob, id, { type: "new_task", key: 2, task: "eggs", desc: "", completed: false });
    await added(bob, id, { type: "strike", key: "0,canned" });
    await refused(bob, id, { type: "new_task_list_title", title: "Mine" }, "You can't edit the task list title unless you are the author.");
    await refused(bob, id, { type: "new_task", key: 3, task: "jam", desc: "", completed: "no" }, 'todo data["completed"] is not a boolean');
    expect(await submessagesIn(bob, id)).toHaveLength(3);
  });

  it("writes a widget's question as Zulip's server does, non-ASCII escaped", async () => {
    const id = await toChannel(alice, "lunch", "/poll Café ☕?");
    expect((await submessagesIn(alice, id))[0]!.content).toBe('{"widget_type": "poll", "extra_data": {"question": "Caf\\u00e9 \\u2615?", "options": []}}');
    // Only the command itself makes a widget.
    expect(await submessagesIn(alice, await toChannel(alice, "lunch", "/polls are fun"))).toEqual([]);
    expect(await submessagesIn(alice, await toChannel(alice, "lunch", " /poll indented"))).toEqual([]);
  });

  it("lets the sender start submessages on any message, then its readers, and only readers", async () => {
    const plain = await toChannel(alice, "misc", "no widget here");
    await refused(bob, plain, { anything: 1 }, "You cannot attach a submessage to this message.");
    await added(alice, plain, { anything: 1 });
    await added(bob, plain, { anything: 2 });
    expect((await submessagesIn(bob, plain)).map((s) => s.sender_id)).toEqual([alice.id, bob.id]);

    const secret = await toChannel(alice, "hidden", "/poll Secret?", "secret");
    await refused(carol, secret, { type: "vote", key: "canned,0", vote: 1 }, "Invalid message(s)");
    await refused(bob, 999_999_999, { type: "vote", key: "canned,0", vote: 1 }, "Invalid message(s)");
    const missing = await api(server, "POST", "/submessage", { as: bob, params: { message_id: plain, msg_type: "widget" } });
    expect(missing.status).toBe(400);
    expect(missing.body.msg).toMatch(/content/);
  });

  it("refuses an edit of a widget message's content, and still moves its topic", async () => {
    const id = await toChannel(alice, "lunch", "/poll Edit me?");
    const edit = await patch(alice, id, { content: "/poll Edited?" });
    expect(edit.status).toBe(400);
    expect(edit.body.msg).toBe("Widgets cannot be edited.");
    expect((await patch(alice, id, { topic: "moved lunch" })).status).toBe(200);
    expect((await get(alice, { anchor: id, num_before: 0, num_after: 0 })).body.messages[0]).toMatchObject({ subject: "moved lunch", content: "/poll Edit me?" });
  });
});
