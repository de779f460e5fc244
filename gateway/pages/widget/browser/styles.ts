/**
 * The widget's stylesheet, applied inside its shadow root only: the host page's CSS does not reach in and this
 * does not leak out. Theme values arrive as custom properties set on the host element (widget.ts).
 */
export const WIDGET_CSS = `
:host { --accent: #2f5fd0; --accent-fg: #fff; --bg: #fff; --fg: #1d2330; --muted: #5b6475; --line: #d9dde5; --bubble-bg: #f1f3f7; --error: #b3261e; }
.launcher, .panel { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); text-align: left; letter-spacing: normal; }
:host([data-theme="dark"]) { --bg: #1f232b; --fg: #e6e8ee; --muted: #a2a9b8; --line: #343a46; --bubble-bg: #2a2f39; --error: #ff8a80; }
@media (prefers-color-scheme: dark) {
  :host([data-theme="auto"]) { --bg: #1f232b; --fg: #e6e8ee; --muted: #a2a9b8; --line: #343a46; --bubble-bg: #2a2f39; --error: #ff8a80; }
}
* { box-sizing: border-box; }
button, textarea { font: inherit; cursor: pointer; }
textarea { cursor: text; }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.launcher { width: 56px; height: 56px; border-radius: 50%; border: 0; background: var(--accent); color: var(--accent-fg);
  box-shadow: 0 4px 14px rgba(0,0,0,.25); display: grid; place-items: center; margin-left: auto; }
:host([data-position="left"]) .launcher { margin-left: 0; }
.launcher svg { width: 26px; height: 26px; fill: currentColor; }
.panel { position: absolute; bottom: 70px; right: 0; width: min(380px, calc(100vw - 40px)); height: min(560px, calc(100vh - 110px));
  background: var(--bg); color: var(--fg); border: 1px solid var(--line); border-radius: 14px; box-shadow: 0 10px 40px rgba(0,0,0,.25);
  display: flex; flex-direction: column; overflow: hidden; }
:host([data-position="left"]) .panel { right: auto; left: 0; }
.panel[hidden] { display: none; }
header { display: flex; align-items: center; gap: 8px; padding: 12px 14px; background: var(--accent); color: var(--accent-fg); }
header h2 { font-size: 16px; margin: 0; flex: 1; }
.icon { background: transparent; border: 0; color: inherit; width: 32px; height: 32px; border-radius: 8px; font-size: 20px; line-height: 1; }
.log { flex: 1; overflow-y: auto; padding: 14px; display: flex; flex-direction: column; gap: 10px; }
.msg { max-width: 88%; padding: 8px 12px; border-radius: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
.msg.user { align-self: flex-end; background: var(--accent); color: var(--accent-fg); border-bottom-right-radius: 4px; }
.msg.assistant { align-self: flex-start; background: var(--bubble-bg); border-bottom-left-radius: 4px; }
.msg.greeting { color: var(--muted); }
.msg[aria-busy="true"] .text::after { content: "\\2026"; }
.sources { margin: 6px 0 0; padding: 6px 0 0; border-top: 1px solid var(--line); font-size: 13px; list-style: none; }
.sources::before { content: "Sources"; display: block; font-weight: 600; color: var(--muted); }
.sources li { margin: 2px 0; }
.sources a { color: var(--accent); }
:host([data-theme="dark"]) .sources a { color: inherit; }
.status { margin: 0 14px; padding: 8px 10px; border-radius: 8px; border: 1px solid var(--error); color: var(--error); font-size: 14px;
  display: flex; gap: 8px; align-items: center; }
.status:empty, .status[hidden] { display: none; }
.status span { flex: 1; }
.status button { border: 1px solid currentColor; background: transparent; color: inherit; border-radius: 6px; padding: 2px 10px; }
form { display: flex; gap: 8px; padding: 12px 14px; border-top: 1px solid var(--line); }
textarea { flex: 1; resize: none; font: inherit; color: var(--fg); background: var(--bg); border: 1px solid var(--line); border-radius: 10px; padding: 8px 10px; height: 42px; }
.send { border: 0; border-radius: 10px; background: var(--accent); color: var(--accent-fg); padding: 0 14px; font-weight: 600; }
.send[disabled] { opacity: .6; cursor: progress; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
`;
