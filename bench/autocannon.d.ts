/** The part of autocannon 9's programmatic API the bench uses (the package ships no typings). */
declare module "autocannon" {
  interface AutocannonOptions {
    url: string;
    connections?: number;
    pipelining?: number;
    overallRate?: number;
    /** Seconds. */
    duration?: number;
    /** Seconds before a request counts as a timeout. */
    timeout?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    title?: string;
    /** Requests each connection cycles through; setupRequest may change a request before it is sent. */
    requests?: Array<{ setupRequest?: (request: { headers: Record<string, string>; body?: string }, context: object) => { headers: Record<string, string>; body?: string } }>;
  }

  /** Percentiles autocannon reports (hdr-histogram-percentiles-obj). */
  interface AutocannonHistogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    total: number;
    p1: number;
    p2_5: number;
    p10: number;
    p50: number;
    p90: number;
    p97_5: number;
    p99: number;
    p99_9: number;
    sent?: number;
  }

  interface AutocannonResult {
    title?: string;
    url: string;
    connections: number;
    pipelining: number;
    duration: number;
    samples: number;
    start: Date;
    finish: Date;
    errors: number;
    timeouts: number;
    mismatches: number;
    non2xx: number;
    resets: number;
    "1xx": number;
    "2xx": number;
    "3xx": number;
    "4xx": number;
    "5xx": number;
    statusCodeStats: Record<string, { count: number }>;
    /** Milliseconds. */
    latency: AutocannonHistogram;
    /** Requests per one-second sample. */
    requests: AutocannonHistogram;
    /** Bytes per one-second sample. */
    throughput: AutocannonHistogram;
  }

  /** The run: a promise of its result, and `stop()` to end it early (the result then covers what ran). */
  function autocannon(opts: AutocannonOptions): PromiseLike<AutocannonResult> & { stop(): void };
  export default autocannon;
  export type { AutocannonOptions, AutocannonResult, AutocannonHistogram };
}
