/**
 * Custom profile fields: the organization's fields (GET, POST, PATCH, DELETE /realm/profile_fields) and a user's
 * own values (PATCH, DELETE /users/me/profile_data). Changes are realm actor turns (actors/chat/organization/profile-fields.ts),
 * which check permissions and values; administrators set other users' values through PATCH /users/{user_id}.
 */
import { profileFieldObjects } from "../../actors/chat/organization/profile-fields.ts";
import { askRealm, type RouteSpec } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";

/** A value as Zulip takes it: text, or a users field's list of user ids. */
export const ProfileValue = { anyOf: [Str, { type: "array", items: Id }] };

const FieldSettings = {
  name: Str,
  hint: Str,
  field_data: { type: "object" },
  display_in_profile_summary: Bool,
  required: Bool,
  editable_by_user: Bool,
};

export const profileFieldRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/realm/profile_fields",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { custom_fields: await profileFieldObjects(services.store.db, user.realm_id) };
    },
  },
  {
    method: "POST",
    path: "/realm/profile_fields",
    params: { type: "object", properties: { ...FieldSettings, field_type: { type: "integer" } }, required: ["field_type"] },
    async handle(call) {
      const { params } = call;
      return askRealm(call, {
        op: "createProfileField",
        name: params.name ?? "",
        hint: params.hint ?? "",
        fieldType: params.field_type,
        fieldData: params.field_data,
        displayInProfileSummary: params.display_in_profile_summary ?? false,
        required: params.required ?? false,
        editableByUser: params.editable_by_user ?? true,
      });
    },
  },
  {
    method: "PATCH",
    path: "/realm/profile_fields",
    params: { type: "object", properties: { order: { type: "array", items: { type: "integer" } } }, required: ["order"] },
    async handle(call) {
      return askRealm(call, { op: "reorderProfileFields", order: call.params.order });
    },
  },
  {
    method: "PATCH",
    path: "/realm/profile_fields/{field_id}",
    params: { type: "object", properties: { field_id: Id, ...FieldSettings }, required: ["field_id"] },
    async handle(call) {
      const { params } = call;
      return askRealm(call, {
        op: "updateProfileField",
        fieldId: params.field_id,
        name: params.name,
        hint: params.hint,
        fieldData: params.field_data,
        displayInProfileSummary: params.display_in_profile_summary,
        required: params.required,
        editableByUser: params.editable_by_user,
      });
    },
  },
  {
    method: "DELETE",
    path: "/realm/profile_fields/{field_id}",
    params: { type: "object", properties: { field_id: Id }, required: ["field_id"] },
    async handle(call) {
      return askRealm(call, { op: "deleteProfileField", fieldId: call.params.field_id });
    },
  },
  {
    method: "PATCH",
    path: "/users/me/profile_data",
    params: {
      type: "object",
      properties: {
        data: {
          type: "array",
          items: { type: "object", properties: { id: Id, value: ProfileValue }, required: ["id", "value"], additionalProperties: false },
        },
      },
      required: ["data"],
    },
    async handle(call) {
      return askRealm(call, { op: "setProfileData", userId: call.user.id, data: call.params.data });
    },
  },
  {
    method: "DELETE",
    path: "/users/me/profile_data",
    params: { type: "object", properties: { data: { type: "array", items: Id } }, required: ["data"] },
    async handle(call) {
      return askRealm(call, { op: "removeProfileData", userId: call.user.id, fieldIds: call.params.data });
    },
  },
];
