/**
 * Linkifiers in the renderer: Zulip's boundaries (zerver/lib/markdown prepare_linkifier_pattern), re2 syntax
 * translated to JavaScript's, the order of overlapping linkifiers, and what is never linked (code, links, unsafe
 * schemes).
 */
import { describe, expect, it } from "vitest";
import { renderMarkdown } from "../../../../actors/chat/rendering/markdown.ts";
import { compileLinkifier, patternGroups, translatePattern } from "../../../../actors/chat/rendering/linkifiers.ts";

const TRAC = compileLinkifier("#(?P<id>[0-9]{2,8})", "https://trac.example.com/ticket/{id}");
const html = (content: string, linkifiers = [TRAC]) => renderMarkdown(content, { linkifiers }).html;
const trac = (id: string) => `<a href="https://trac.example.com/ticket/${id}">#${id}</a>`;

describe("linkifiers", () => {
  it("match only at Zulip's boundaries", () => {
    expect(html("#12")).toBe(`<p>${trac("12")}</p>`);
    expect(html("(#12), '#34' and \"#56\": #78.")).toBe(`<p>(${trac("12")}), '${trac("34")}' and "${trac("56")}": ${trac("78")}.</p>`);
    expect(html("x#12 #12a #1")).toBe("<p>x#12 #12a #1</p>");
    expect(html("#12 #34")).toBe(`<p>${trac("12")} ${trac("34")}</p>`);
    expect(html("line\n#12")).toBe(`<p>line<br>\n${trac("12")}</p>`);
  });

  it("leave code, links and what follows them alone", () => {
    expect(html("`#12` [#34](https://x.example.com) https://x.example.com/#56")).toBe(
      '<p><code>#12</code> <a href="https://x.example.com">#34</a> <a href="https://x.example.com/#56">https://x.example.com/#56</a></p>',
    );
    expect(html("```\n#12\n```")).not.toContain("<a");
  });

  it("apply in order: the first linkifier takes an overlap", () => {
    const wide = compileLinkifier("#(?P<id>[0-9]+)", "https://wide.example.com/{id}");
    expect(html("#123", [wide, TRAC])).toBe('<p><a href="https://wide.example.com/123">#123</a></p>');
    expect(html("#123", [TRAC, wide])).toBe(`<p>${trac("123")}</p>`);
  });

  it("link nothing whose URL has an unsafe scheme, and encode values as RFC 6570 says", () => {
    const unsafe = compileLinkifier("run (?P<cmd>\\w+)", "javascript:{cmd}");
    expect(html("run it", [unsafe])).toBe("<p>run it</p>");
    const query = compileLinkifier("search:(?P<q>[a-z]+)", "https://find.example.com/{?q}");
    expect(html("search:cats", [query])).toBe('<p><a href="https://find.example.com/?q=cats">search:cats</a></p>');
  });

  it("translate re2 syntax", () => {
    expect(translatePattern("(?i)JIRA-(?P<id>\\pN+)\\#")).toEqual({ source: "JIRA-(?<id>\\p{N}+)\\u{23}", flags: "i" });
    expect([...patternGroups("(?P<org>\\w+)/(?P<repo>\\w+)(?:x)(?<=y)")]).toEqual(["org", "repo"]);
    const jira = compileLinkifier("(?i)JIRA-(?P<id>\\d+)", "https://jira.example.com/{id}");
    expect(html("see jira-7", [jira])).toBe('<p>see <a href="https://jira.example.com/7">jira-7</a></p>');
    expect(() => compileLinkifier("(?P<id>[0-9]+", "{id}")).toThrow(SyntaxError);
  });
});
