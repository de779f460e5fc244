/** Latency samples as a log histogram, so that figures from several client processes merge by adding. */

/** 2% wide buckets from 10 µs. */
export interface Histogram {
  counts: number[];
  count: number;
  sum: number;
  max: number;
}

const BUCKET_BASE_MS = 0.01;
const BUCKET_GROWTH = Math.log(1.02);
const BUCKETS = 1024;

export function emptyHistogram(): Histogram {
  return { counts: new Array<number>(BUCKETS).fill(0), count: 0, sum: 0, max: 0 };
}

export function record(h: Histogram, ms: number): void {
  const i = ms <= BUCKET_BASE_MS ? 0 : Math.min(BUCKETS - 1, Math.ceil(Math.log(ms / BUCKET_BASE_MS) / BUCKET_GROWTH));
  h.counts[i]!++;
  h.count++;
  h.sum += ms;
  if (ms > h.max) h.max = ms;
}

export function mergeHistograms(hs: Histogram[]): Histogram {
  const out = emptyHistogram();
  for (const h of hs) {
    for (let i = 0; i < BUCKETS; i++) out.counts[i]! += h.counts[i]!;
    out.count += h.count;
    out.sum += h.sum;
    out.max = Math.max(out.max, h.max);
  }
  return out;
}

/** A percentile as its bucket's upper bound (within 2%), never above the largest sample. */
export function percentile(h: Histogram, p: number): number {
  if (!h.count) return NaN;
  const rank = Math.ceil((p / 100) * h.count);
  let seen = 0;
  for (let i = 0; i < BUCKETS; i++) {
    seen += h.counts[i]!;
    if (seen >= rank) return Math.min(h.max, BUCKET_BASE_MS * Math.exp(i * BUCKET_GROWTH));
  }
  return h.max;
}
