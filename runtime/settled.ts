/** Bounded waits for work in flight. */

/**
 * Whether every promise of `work` settled within `ms`; never rejects. `work` may change while it is waited for (a set
 * its promises leave as they settle, or join): a promise added meanwhile is waited for too, within the same `ms`.
 */
export async function settledWithin(work: Iterable<Promise<unknown>>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  const waited = new Set<Promise<unknown>>();
  for (;;) {
    const pending = [...work].filter((p) => !waited.has(p));
    if (pending.length === 0) return true;
    const left = deadline - Date.now();
    if (left <= 0) return false;
    let timer: NodeJS.Timeout | undefined;
    const settled = await Promise.race([
      Promise.allSettled(pending).then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), left))),
    ]);
    clearTimeout(timer);
    if (!settled) return false;
    for (const p of pending) waited.add(p);
  }
}
