/** The realm the invitation tests start from: its owner, a member, channels and a group to invite people into. */
import { api, createUser, type Credentials, type TestServer } from "./server.ts";

export interface InvitationRealm {
  owner: Credentials & { id: number };
  member: Credentials & { id: number };
  /** A public channel, and a private one only the owner is subscribed to. */
  channelId: number;
  privateId: number;
  /** A user group nobody belongs to yet. */
  groupId: number;
}

export async function invitationRealm(server: TestServer): Promise<InvitationRealm> {
  const owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
  const member = await createUser(server, "member@example.com", "Mo");
  await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "welcome" }] } });
  await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "secret" }], invite_only: true } });
  const subs = (await api(server, "GET", "/users/me/subscriptions", { as: owner })).body.subscriptions;
  const group = await api(server, "POST", "/user_groups/create", { as: owner, params: { name: "newcomers", description: "", members: [] } });
  return {
    owner,
    member,
    channelId: subs.find((s: any) => s.name === "welcome").stream_id,
    privateId: subs.find((s: any) => s.name === "secret").stream_id,
    groupId: group.body.group_id,
  };
}
