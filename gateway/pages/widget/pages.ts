/**
 * The embed widget: `/widget.js`, one script any site includes to add the assistant's chat bubble
 * (widget/browser/widget.ts). It has no pages of its own.
 */
import type { PageSet } from "../routes.ts";

export const widgetPages: PageSet = {
  entries: { widget: "widget/browser/widget.ts" },
  pages: [],
  // Five minutes: a release reaches the sites that embed the widget soon, and their visitors revalidate by ETag.
  scripts: [{ path: "/widget.js", asset: "widget.js", cacheControl: "public, max-age=300" }],
};
