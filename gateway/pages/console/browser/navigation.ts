/**
 * Re-rendering the current view, for views that change what they show: the views call `refresh`, the console's
 * entry (console.ts) says how, so views and entry do not import each other.
 */
let rerender: () => Promise<void> = async () => {};

export function onRefresh(render: () => Promise<void>): void {
  rerender = render;
}

/** Render the current view again (after a change it shows). */
export function refresh(): Promise<void> {
  return rerender();
}
