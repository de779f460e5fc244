/**
 * Linkifiers and code playgrounds: GET /realm/linkifiers, POST /realm/filters, PATCH and DELETE
 * /realm/filters/{filter_id}, PATCH /realm/linkifiers (the order), POST /realm/playgrounds and DELETE
 * /realm/playgrounds/{playground_id}; and the legacy GET /realm/filters, which zulip-js's `filters.retrieve` still
 * calls. Changes are realm actor turns, which check that the caller is an administrator and the values.
 */
import { linkifierObjects } from "../../actors/chat/organization/linkifiers.ts";
import { askRealm, type RouteSpec } from "./app.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import { Id, Str, type ParamsSchema } from "../params.ts";
import type { Linkifier } from "../../actors/chat/rendering/linkifiers.ts";

const LinkifierParams = { pattern: Str, url_template: Str, url_format_string: Str };
const FilterIdParams: ParamsSchema = { type: "object", properties: { filter_id: Id, ...LinkifierParams }, required: ["filter_id"] };

/**
 * A linkifier as Zulip before 4.0 (feature level 54) listed it: `[pattern, url_format_string, id]`, the URL with
 * `%(name)s` for each group. Only templates of plain `{name}` expressions have that form; the others are left out.
 */
function legacyFilter(linkifier: Linkifier): [string, string, number] | undefined {
  const template = linkifier.url_template;
  if (/\{[^}]*[^\w}][^}]*\}/.test(template)) return undefined;
  return [linkifier.pattern, template.replaceAll("%", "%%").replace(/\{(\w+)\}/g, "%($1)s"), linkifier.id];
}

/**
 * The URL template of a request. python-zulip-api's add_realm_filter still sends the pre-7.0 `url_format_string`
 * (`%(name)s` for each group), which Zulip now refuses; Chorus takes it as the template it stands for.
 */
function urlTemplateOf(params: Record<string, any>): string {
  if (params.url_template !== undefined) return params.url_template;
  if (params.url_format_string === undefined) throw chatErrors.missing("url_template");
  return String(params.url_format_string).replace(/%\((\w+)\)s|%%/g, (whole, name: string | undefined) => (name ? `{${name}}` : "%"));
}

export const linkifierRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/realm/linkifiers",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { linkifiers: await linkifierObjects(services.store.db, user.realm_id) };
    },
  },
  {
    method: "GET",
    path: "/realm/filters",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      const linkifiers = await linkifierObjects(services.store.db, user.realm_id);
      return { filters: linkifiers.map(legacyFilter).filter((f) => f !== undefined) };
    },
  },
  {
    method: "POST",
    path: "/realm/filters",
    params: { type: "object", properties: LinkifierParams, required: ["pattern"] },
    async handle(call) {
      const added = await askRealm(call, { op: "addLinkifier", pattern: call.params.pattern, urlTemplate: urlTemplateOf(call.params) });
      return { id: added.id };
    },
  },
  {
    method: "PATCH",
    path: "/realm/filters/{filter_id}",
    params: { ...FilterIdParams, required: ["filter_id", "pattern"] },
    async handle(call) {
      const { params } = call;
      return askRealm(call, { op: "updateLinkifier", id: params.filter_id, pattern: params.pattern, urlTemplate: urlTemplateOf(params) });
    },
  },
  {
    method: "DELETE",
    path: "/realm/filters/{filter_id}",
    params: FilterIdParams,
    async handle(call) {
      return askRealm(call, { op: "removeLinkifier", id: call.params.filter_id });
    },
  },
  {
    method: "PATCH",
    path: "/realm/linkifiers",
    params: { type: "object", properties: { ordered_linkifier_ids: { type: "array", items: { type: "integer" } } }, required: ["ordered_linkifier_ids"] },
    async handle(call) {
      return askRealm(call, { op: "reorderLinkifiers", order: call.params.ordered_linkifier_ids });
    },
  },
  {
    method: "POST",
    path: "/realm/playgrounds",
    params: { type: "object", properties: { name: Str, pygments_language: Str, url_template: Str }, required: ["name", "pygments_language", "url_template"] },
    async handle(call) {
      const { params } = call;
      const added = await askRealm(call, { op: "addPlayground", name: params.name, pygmentsLanguage: params.pygments_language, urlTemplate: params.url_template });
      return { id: added.id };
    },
  },
  {
    method: "DELETE",
    path: "/realm/playgrounds/{playground_id}",
    params: { type: "object", properties: { playground_id: Id }, required: ["playground_id"] },
    async handle(call) {
      return askRealm(call, { op: "removePlayground", id: call.params.playground_id });
    },
  },
];
