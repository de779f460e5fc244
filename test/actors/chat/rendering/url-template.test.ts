/** RFC 6570's own examples (section 3.2), and the checks Zulip's linkifiers and playgrounds make. */
import { describe, expect, it } from "vitest";
import { expandUrlTemplate, isUrlTemplate, templateVariables } from "../../../../actors/chat/rendering/url-template.ts";

const VALUES = { var: "value", hello: "Hello World!", path: "/foo/bar", empty: "", x: "1024", y: "768" };

describe("URL templates", () => {
  it.each([
    ["{var}", "value"],
    ["{hello}", "Hello%20World%21"],
    ["{+hello}", "Hello%20World!"],
    ["{+path}/here", "/foo/bar/here"],
    ["{#path,x}/here", "#/foo/bar,1024/here"],
    ["X{.var}", "X.value"],
    ["{/var,x}/here", "/value/1024/here"],
    ["{;x,y,empty}", ";x=1024;y=768;empty"],
    ["{?x,y,empty}", "?x=1024&y=768&empty="],
    ["?fixed=yes{&x}", "?fixed=yes&x=1024"],
    ["{var:3}", "val"],
    ["{undef}", ""],
    ["https://example.com/{?undef,x}", "https://example.com/?x=1024"],
  ])("expands %s", (template, expected) => {
    expect(expandUrlTemplate(template, VALUES)).toBe(expected);
  });

  it("refuses what is not a template, and names the variables of one", () => {
    for (const bad of ["{var", "var}", "{}", "{a b}", "https://x.com/ {id}", "{=x}"]) expect(isUrlTemplate(bad), bad).toBe(false);
    expect([...templateVariables("https://x.com/{org}/{repo}/issues/{id}{?q}")]).toEqual(["org", "repo", "id", "q"]);
  });
});
