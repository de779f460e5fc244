/**
 * The markdown renderer against Zulip's own conformance corpus (../shared/zulip/markdown_test_cases.json), plus
 * the Zulip constructs that need lookups (mentions, groups, channel links), which the corpus barely covers.
 *
 * Every corpus case must match byte for byte, except those named in UNSUPPORTED with the reason; those run as
 * `it.fails`, so a case that starts passing is noticed and moved out of the list.
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { hasZulipReference, zulipReferencePath } from "../../../support/zulip-reference.ts";
import { isPlainLine, renderMarkdown, renderWithMarkdownIt, type MarkdownContext, type MentionableUser } from "../../../../actors/chat/rendering/markdown.ts";
import { rewriteUploadPreviews, type UploadPreview } from "../../../../actors/chat/rendering/thumbnails.ts";

interface CorpusCase {
  name: string;
  input: string;
  expected_output: string;
  translate_emoticons?: boolean;
}

type Corpus = { regular_tests: CorpusCase[]; linkify_tests: Array<[string, string, string]> };
// Without the corpus (a fresh clone) its two suites are skipped; global-setup.ts says so once.
const HAVE_CORPUS = hasZulipReference("markdown_test_cases.json");
const corpus: Corpus = HAVE_CORPUS
  ? JSON.parse(fs.readFileSync(zulipReferencePath("markdown_test_cases.json"), "utf8"))
  : { regular_tests: [], linkify_tests: [] };

const PYGMENTS =
  "Zulip colours code with Pygments (Python), and no npm package writes Pygments' token markup; all but the token spans match";

const UNSUPPORTED: Record<string, string> = {
  codeblock_hilite_python: PYGMENTS,
  codeblock_canonicalize_lang_alias: PYGMENTS,
  codeblock_hilite_shebang_feature_no_path_1: PYGMENTS,
  codeblock_hilite_shebang_feature_no_path_2: PYGMENTS,
  codeblock_hilite_shebang_feature_with_path: PYGMENTS,
  codeblock_hilite_startinline_php: PYGMENTS,
  tex_fenced_tex: PYGMENTS,
  tex_fenced_latex: PYGMENTS,
  fried_egg_emoji_nonexistent: "Zulip's hand-curated emoji names drop iamcal's `fried_egg`; we keep iamcal's names",
  non_empty_blockquote:
    "Python-Markdown reads `>` / `>` / `text` as one quote (lazy line after empty quote lines); CommonMark does not",
  ulist_list_two_space_indent:
    "Python-Markdown keeps a list item's continuation indentation in the text; invisible once rendered",
};

/** The users Zulip's corpus assumes (its test database). */
const USERS: MentionableUser[] = [{ id: 7, full_name: "Zoe" }];

function corpusContext(testCase: CorpusCase): MarkdownContext {
  return {
    realmUrl: "http://zulip.testserver",
    inlinePreviews: true,
    // Zulip's test settings.
    camo: { url: "https://external-content.zulipcdn.net/external_content/", key: "dummy" },
    translateEmoticons: testCase.translate_emoticons ?? false,
    userById: (id) => USERS.find((u) => u.id === id),
    userByName: (name) => USERS.find((u) => u.full_name.toLowerCase() === name.toLowerCase()),
  };
}

describe.skipIf(!HAVE_CORPUS)("Zulip's markdown corpus", () => {
  it("names only cases that exist", () => {
    const names = new Set(corpus.regular_tests.map((t) => t.name));
    expect(Object.keys(UNSUPPORTED).filter((name) => !names.has(name))).toEqual([]);
  });

  for (const testCase of corpus.regular_tests) {
    const reason = UNSUPPORTED[testCase.name];
    const render = () => renderMarkdown(testCase.input, corpusContext(testCase)).html;
    const run = () => expect(render()).toBe(testCase.expected_output);
    if (reason) it.fails(`${testCase.name} (unsupported: ${reason})`, run);
    else it(testCase.name, run);
    if (reason === PYGMENTS) {
      // Pygments' tokens (`<span class="k">def</span>`) aside, the block is Zulip's: language name, escaping, lines.
      const withoutTokens = testCase.expected_output.replace(/<span class="[a-z0-9]+">([^<]*)<\/span>/g, "$1");
      it(`${testCase.name}, but for Pygments' token spans`, () => expect(render()).toBe(withoutTokens));
    }
  }
});

/** Zulip's linkify cases: input, output with `%s` for the link, and the linked text (empty: no link). */
const UNSUPPORTED_LINKIFY: Record<string, string> = {
  "from http://supervisord.org/running.html:": "linkify-it keeps a trailing colon in the URL",
  "javascript:foo.com": "linkify-it finds no domain right after a colon",
  "about:blank.com": "linkify-it finds no domain right after a colon",
  "[foo](javascript:foo.com)": "linkify-it finds no domain right after a colon",
  "six nested parens https://zulip.com/(we_like_((t(d(o(___)o)o))o_nest_)_nest)_nest": "paren nesting limits differ",
  "quora http://generate.quora.net/render?width=700&from=-4hours&until=now&height=400&bgcolor=black&lineMode=connected&title=arb%20hint%20status&target=alias(ans.hintland.hand.arb.enhint_rate%2C%22enhint%20rate%22)&target=alias(ans.hintland.hand.arb.unhint_rate%2C%22unhint%20rate%22)&target=alias(ans.hintland.hand.arb.size%2C%22hint%20size%22)&target=alias(scale(ans.vagabond.dingarb_cube_count%2C10000)%2C%22cube%20count%20x%2010K%22)&target=alias(scale(hnumbers.time.ding.gegevens.query.count%2C10)%2C%22ding%20gegevens%20query%20count%20x%2010%22)&fgcolor=white&uniq=0.44046106841415167":
    "markdown-it shows percent-escapes decoded in the link text",
};

describe.skipIf(!HAVE_CORPUS)("Zulip's linkify corpus", () => {
  for (const [input, template, url] of corpus.linkify_tests) {
    // Zulip's test builds the link the same way: bare domains get http://, addresses mailto:.
    const href = url.startsWith("http") ? url : url.includes("@") ? `mailto:${url}` : `http://${url}`;
    const expected = url ? template.replace("%s", `<a href="${href}">${url}</a>`) : template;
    const run = () => expect(renderMarkdown(input, { realmUrl: "http://zulip.testserver" }).html).toBe(expected);
    const reason = UNSUPPORTED_LINKIFY[input];
    if (reason) it.fails(`${input.slice(0, 60)} (unsupported: ${reason})`, run);
    else it(input.slice(0, 80), run);
  }
});

describe("mentions, groups and channel links", () => {
  const hamlet = { id: 10, full_name: "King Hamlet" };
  const ghost = { id: 11, full_name: "Old Ghost", is_active: false };
  const users = [hamlet, ghost, { id: 12, full_name: "<b>Evil</b>" }];
  const context: MarkdownContext = {
    userByName: (name) => users.find((u) => u.full_name.toLowerCase() === name.toLowerCase()),
    userById: (id) => users.find((u) => u.id === id),
    groupByName: (name) => (name === "support" ? { id: 17, name: "support" } : undefined),
    channelByName: (name) => (name === "Denmark" ? { id: 1, name: "Denmark" } : name === "a.b c" ? { id: 2, name: "a.b c" } : undefined),
  };
  const render = (content: string) => renderMarkdown(content, context);

  it("mentions a user by name, reporting the id", () => {
    const result = render("hi @**king hamlet**");
    expect(result.html).toBe('<p>hi <span class="user-mention" data-user-id="10">@King Hamlet</span></p>');
    expect(result.mentionedUserIds).toEqual([10]);
    expect(result.wildcardMention).toBeNull();
  });

  it("mentions a user by name and id, and refuses a name that is not that user's", () => {
    expect(render("@**King Hamlet|10**").html).toBe('<p><span class="user-mention" data-user-id="10">@King Hamlet</span></p>');
    expect(render("@**|10**").mentionedUserIds).toEqual([10]);
    const wrong = render("@**Old Ghost|10**");
    expect(wrong.html).toBe("<p>@<strong>Old Ghost|10</strong></p>"); // what is left is bold text, as in Zulip
    expect(wrong.mentionedUserIds).toEqual([]);
  });

  it("renders silent mentions without @ and without notifying", () => {
    const result = render("@_**King Hamlet**");
    expect(result.html).toBe('<p><span class="user-mention silent" data-user-id="10">King Hamlet</span></p>');
    expect(result.mentionedUserIds).toEqual([]);
  });

  it("mentions a deactivated user silently", () => {
    const result = render("@**Old Ghost**");
    expect(result.html).toBe('<p><span class="user-mention silent" data-user-id="11">Old Ghost</span></p>');
    expect(result.mentionedUserIds).toEqual([]);
  });

  it("does not mention unknown users, nor inside code or words", () => {
    const result = render("@**Nobody** and `@**King Hamlet**` and a@**King Hamlet**");
    expect(result.html).toBe(
      "<p>@<strong>Nobody</strong> and <code>@**King Hamlet**</code> and a@<strong>King Hamlet</strong></p>",
    );
    expect(result.mentionedUserIds).toEqual([]);
  });

  it("escapes names", () => {
    expect(render("@**<b>Evil</b>**").html).toBe(
      '<p><span class="user-mention" data-user-id="12">@&lt;b&gt;Evil&lt;/b&gt;</span></p>',
    );
  });

  it("recognises channel and topic wildcards; silent ones do not count", () => {
    for (const name of ["all", "everyone", "channel", "stream"]) {
      const result = render(`@**${name}**`);
      expect(result.html).toBe(`<p><span class="user-mention channel-wildcard-mention" data-user-id="*">@${name}</span></p>`);
      expect(result.wildcardMention).toBe("channel");
    }
    const topic = render("@**topic**");
    expect(topic.html).toBe('<p><span class="topic-mention">@topic</span></p>');
    expect(topic.wildcardMention).toBe("topic");
    expect(render("@**topic** @**all**").wildcardMention).toBe("channel");
    const silent = render("@_**all**");
    expect(silent.html).toBe('<p><span class="user-mention channel-wildcard-mention silent" data-user-id="*">all</span></p>');
    expect(silent.wildcardMention).toBeNull();
  });

  it("mentions user groups", () => {
    const result = render("@*support* and @_*support* and @*nope*");
    expect(result.html).toBe(
      '<p><span class="user-group-mention" data-user-group-id="17">@support</span> and ' +
        '<span class="user-group-mention silent" data-user-group-id="17">support</span> and @<em>nope</em></p>',
    );
    expect(result.mentionedGroupIds).toEqual([17]);
  });

  it("links channels and topics with Zulip's narrow encoding", () => {
    expect(render("#**Denmark**").html).toBe(
      '<p><a class="stream" data-stream-id="1" href="/#narrow/channel/1-Denmark">#Denmark</a></p>',
    );
    expect(render("#**Denmark>some topic**").html).toBe(
      '<p><a class="stream-topic" data-stream-id="1" href="/#narrow/channel/1-Denmark/topic/some.20topic">#Denmark &gt; some topic</a></p>',
    );
    expect(render("#**a.b c>x.y**").html).toBe(
      '<p><a class="stream-topic" data-stream-id="2" href="/#narrow/channel/2-a.2Eb-c/topic/x.2Ey">#a.b c &gt; x.y</a></p>',
    );
    expect(render("#**Nowhere**").html).toBe("<p>#<strong>Nowhere</strong></p>");
  });

  it("renders without any lookups", () => {
    expect(renderMarkdown("@**King Hamlet** #**Denmark** @*support*").html).toBe(
      "<p>@<strong>King Hamlet</strong> #<strong>Denmark</strong> @<em>support</em></p>",
    );
  });
});

describe("other Zulip syntax", () => {
  it("renders realm emoji, Zulip's own emoji and unicode emoji names", () => {
    const context: MarkdownContext = {
      realmEmojiByName: (name) => (name === "party_parrot" ? { id: "3", source_url: "/user_avatars/1/emoji/3.gif" } : undefined),
    };
    expect(renderMarkdown(":party_parrot: :zulip: :+1: :thumbs_up:", context).html).toBe(
      '<p><img alt=":party_parrot:" class="emoji" src="/user_avatars/1/emoji/3.gif" title="party parrot"> ' +
        '<img alt=":zulip:" class="emoji" src="/static/generated/emoji/images/emoji/unicode/zulip.png" title="zulip"> ' +
        '<span aria-label="+1" class="emoji emoji-1f44d" role="img" title="+1">:+1:</span> ' +
        '<span aria-label="thumbs up" class="emoji emoji-1f44d" role="img" title="thumbs up">:thumbs_up:</span></p>',
    );
  });

  // As Python-Markdown's tables extension writes them: the mobile app renders a table only with cells styled
  // exactly so, and with a body (zulip-flutter parseTableContent).
  it("writes a column's alignment and a table of headers alone as Zulip does", () => {
    const aligned = renderMarkdown("| a | b | c | d |\n|:-|:-:|-:|-|\n| 1 | 2 | 3 | 4 |").html;
    expect(aligned).toContain('<th style="text-align: left;">a</th>\n<th style="text-align: center;">b</th>\n<th style="text-align: right;">c</th>\n<th>d</th>');
    expect(aligned).toContain('<td style="text-align: left;">1</td>\n<td style="text-align: center;">2</td>\n<td style="text-align: right;">3</td>\n<td>4</td>');
    expect(renderMarkdown("| a | b |\n| - | - |").html).toBe(
      "<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td></td>\n<td></td>\n</tr>\n</tbody>\n</table>",
    );
  });

  it("renders spoilers and quotes with nested fences", () => {
    expect(renderMarkdown("```quote\n```spoiler Title\n```python\nx = 1\n```\n```\n```").html).toBe(
      "<blockquote>\n" +
        '<div class="spoiler-block"><div class="spoiler-header">\n<p>Title</p>\n' +
        '</div><div class="spoiler-content" aria-hidden="true">\n' +
        '<div class="codehilite" data-code-language="Python"><pre><span></span><code>x = 1\n</code></pre></div>\n' +
        "</div></div>\n</blockquote>",
    );
  });

  it("reports links, and turns realm links into fragments", () => {
    expect(renderMarkdown("no link here").hasLink).toBe(false);
    const result = renderMarkdown("see https://chat.example.com/#narrow/channel/1-x", { realmUrl: "https://chat.example.com/" });
    expect(result.hasLink).toBe(true);
    expect(result.html).toBe('<p>see <a href="#narrow/channel/1-x">https://chat.example.com/#narrow/channel/1-x</a></p>');
  });

  it("does not link unsafe schemes", () => {
    expect(renderMarkdown("[x](javascript:alert(1)) [y](data:text/html,hi)").html).toBe(
      "<p>[x](javascript:alert(1)) [y](data:text/html,hi)</p>",
    );
  });

  it("labels code with the Pygments lexer's name for any of its aliases, and an unknown language in lower case", () => {
    const label = (lang: string) => /data-code-language="([^"]*)"/.exec(renderMarkdown("```" + lang + "\nx\n```").html)?.[1];
    expect(["hs", "Haskell", "js+php", "Py2", "MyLang"].map(label)).toEqual(["Haskell", "Haskell", "JavaScript+PHP", "Python 2.x", "mylang"]);
  });

  it("takes names that are also Object.prototype's keys as plain text", () => {
    expect(renderMarkdown("```constructor\nx\n```\n:constructor: :__proto__:").html).toBe(
      '<div class="codehilite" data-code-language="constructor"><pre><span></span><code>x\n</code></pre></div>\n' +
        "<p>:constructor: :__proto__:</p>",
    );
  });

  it("renders ISO 8601 timestamps in UTC", () => {
    expect(renderMarkdown("<time:2024-02-29T10:00:00+05:30>").html).toBe(
      '<p><time datetime="2024-02-29T04:30:00Z">2024-02-29T10:00:00+05:30</time></p>',
    );
    expect(renderMarkdown("<time:2023-02-29>").html).toBe(
      '<p><span class="timestamp-error">Invalid time format: 2023-02-29</span></p>',
    );
  });

  it("renders written dates as Zulip's dateutil reads them: midnight without a time, UTC without a zone", () => {
    const time = (text: string) => renderMarkdown(`<time:${text}>`).html;
    expect(time("June 5, 2017 10:30 PM PST")).toBe(
      '<p><time datetime="2017-06-06T06:30:00Z">June 5, 2017 10:30 PM PST</time></p>',
    );
    expect(time("5 June 2017")).toBe('<p><time datetime="2017-06-05T00:00:00Z">5 June 2017</time></p>');
    for (const text of ["tomorrow", "Jun 5 2017 and more", "31 Feb 2017"]) {
      expect(time(text)).toBe(`<p><span class="timestamp-error">Invalid time format: ${text}</span></p>`);
    }
  });

  it("nests ordered lists indented by two spaces, and leaves indented code alone", () => {
    expect(renderMarkdown("1. a\n  1. b\n\n```\n  1. c\n```").html).toBe(
      "<ol>\n<li>a<ol>\n<li>b</li>\n</ol>\n</li>\n</ol>\n" +
        '<div class="codehilite"><pre><span></span><code>  1. c\n</code></pre></div>',
    );
  });
});

describe("inline previews", () => {
  const render = (content: string, context: MarkdownContext = {}) =>
    renderMarkdown(content, { inlinePreviews: true, realmUrl: "https://chat.example.com", ...context }).html;
  const image = (url: string, src = url, title = "") =>
    `<div class="message_inline_image"><a href="${url}"${title}><img src="${src}"></a></div>`;

  it("are for messages only: descriptions render links as links", () => {
    expect(renderMarkdown("https://a.com/x.png").html).toBe('<p><a href="https://a.com/x.png">https://a.com/x.png</a></p>');
    expect(renderMarkdown("![song](https://a.com/s.mp3)").html).toBe('<p>!<a href="https://a.com/s.mp3">song</a></p>');
  });

  it("load external media directly without a camo proxy, and the realm's own media never through it", () => {
    expect(render("https://a.com/x.png")).toBe(image("https://a.com/x.png"));
    expect(render("![song](https://a.com/s.mp3)")).toBe(
      '<p><audio controls preload="metadata" src="https://a.com/s.mp3" title="song"></audio></p>',
    );
    const camo = { url: "https://camo.example.com/", key: "k" };
    expect(render("https://chat.example.com/static/x.png", { camo })).toBe(image("https://chat.example.com/static/x.png"));
  });

  it("go where Zulip puts them: after the paragraph, at the end of a tight list item, else at the end", () => {
    expect(render("# See https://a.com/x.png\ntext")).toBe(
      '<h1>See <a href="https://a.com/x.png">https://a.com/x.png</a></h1>\n<p>text</p>\n' + image("https://a.com/x.png"),
    );
    expect(render("* https://a.com/x.png\n* b")).toBe(`<ul>\n<li>${image("https://a.com/x.png")}</li>\n<li>b</li>\n</ul>`);
    expect(render("[a picture](https://a.com/x.png) and more")).toBe(
      '<p><a href="https://a.com/x.png">a picture</a> and more</p>\n' + image("https://a.com/x.png", undefined, ' title="a picture"'),
    );
  });

  it("leave out quotes, uploads, URLs whose type hides behind a query, and messages with over 24 URLs", () => {
    const none = (content: string) => expect(render(content)).not.toContain("message_inline_image");
    none("> https://a.com/x.png");
    none("https://chat.example.com/user_uploads/1/ab/x.png");
    none("https://a.com/v.mp4?t=1");
    none(Array.from({ length: 25 }, (_, i) => `https://a.com/${i}.png`).join(" "));
    expect(render(Array.from({ length: 24 }, (_, i) => `https://a.com/${i}.png`).join(" "))).toContain(image("https://a.com/23.png"));
  });

  it("preview an uploaded image by its record: a placeholder until its thumbnail is made, then the thumbnail", () => {
    const url = "/user_uploads/1/ab/Zx/photo.png";
    const pending: UploadPreview = { width: 1200, height: 900, contentType: "image/png", animated: false };
    const made: UploadPreview = { ...pending, url: "/user_uploads/thumbnail/1/ab/Zx/photo.png/840x560.webp" };
    const uploadPreview = (preview: UploadPreview) => (path: string) => (path === "1/ab/Zx/photo.png" ? preview : undefined);
    const paragraph = `<p><a href="${url}">photo.png</a></p>\n`;
    const placeholder = `<img class="image-loading-placeholder" src="/static/images/loading/loader-black.svg" data-original-dimensions="1200x900">`;
    const thumbnail = `<img data-original-content-type="image/png" data-original-dimensions="1200x900" src="${made.url}">`;
    const preview = (img: string) => `<div class="message_inline_image"><a href="${url}" title="photo.png">${img}</a></div>`;
    const sent = render(`[photo.png](${url})`, { uploadPreview: uploadPreview(pending) });
    expect(sent).toBe(paragraph + preview(placeholder));
    expect(render(`[photo.png](${url})`, { uploadPreview: uploadPreview(made) })).toBe(paragraph + preview(thumbnail));
    // The job's rewrite gives what rendering with the thumbnail gives; other uploads' placeholders stay.
    expect(rewriteUploadPreviews(sent, { pathId: "1/ab/Zx/photo.png", urlPath: "1/ab/Zx/photo.png" }, made)).toBe(paragraph + preview(thumbnail));
    expect(rewriteUploadPreviews(sent, { pathId: "1/cd/Yy/other.png", urlPath: "1/cd/Yy/other.png" }, made)).toBeUndefined();
    // An image that did not decode loses its preview, and the line break before it.
    expect(rewriteUploadPreviews(sent, { pathId: "1/ab/Zx/photo.png", urlPath: "1/ab/Zx/photo.png" }, null)).toBe(paragraph.trim());
    const animated = render(`[a](${url})`, { uploadPreview: uploadPreview({ ...made, animated: true, url: made.url!.replace("840x560", "840x560-anim") }) });
    expect(animated).toContain(`<img data-animated="true" data-original-content-type="image/png"`);
    // A file without an image record is a link, whatever its name says.
    expect(render(`[photo.png](${url})`)).toBe(paragraph.trim());
  });

  it("preview a GitHub file page as the raw file", () => {
    const url = "https://github.com/zulip/zulip/blob/main/static/images/logo.png";
    expect(render(url)).toBe(image(url, "https://raw.githubusercontent.com/zulip/zulip/main/static/images/logo.png"));
  });
});

describe("the plain-line shortcut", () => {
  // Every string of up to three of these: words and the characters that turn words into markdown (list numbers,
  // domains, emoji names between colons, emoticons, mentions, emphasis, line breaks, entities, non-ASCII).
  const PIECES = ["hello", "it's", "1", "www", "example", ".com", "tada", ":tada:", "all", " ", "  ", ".", ",", "!", "?", "'", ":",
    ")", "#", "@", "*", "_", "-", "&", "\n", "é"];

  it("renders exactly what markdown-it renders", () => {
    let shortcut = 0;
    const EMOTICONS: MarkdownContext = { translateEmoticons: true };
    const check = (content: string) => {
      if (isPlainLine(content)) shortcut++;
      // With emoticons on, the context that changes the most text.
      expect(renderMarkdown(content, EMOTICONS), JSON.stringify(content)).toEqual(renderWithMarkdownIt(content, EMOTICONS));
    };
    for (const a of PIECES) {
      check(a);
      for (const b of PIECES) {
        check(a + b);
        for (const c of PIECES) check(a + b + c);
      }
    }
    expect(shortcut).toBeGreaterThan(500);
  });

  it("takes one line of words and leaves everything that markdown could change to markdown-it", () => {
    for (const plain of ["hello", "Sounds good.", "ok, see you at 10. Thanks!", "it's done", "Why not?"]) {
      expect(isPlainLine(plain), plain).toBe(true);
      expect(renderMarkdown(plain).html).toBe(`<p>${plain}</p>`);
    }
    for (const marked of ["1. one", "example.com", "see www.example.com", "a  b", "trailing ", " leading", "a\nb", "smile :)",
      ":tada:", "@all", "#general", "*hi*", "a & b", "café", "x_y"]) {
      expect(isPlainLine(marked), marked).toBe(false);
    }
  });
});
