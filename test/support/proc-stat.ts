/**
 * A process's CPU times from Linux's /proc/<pid>/stat, for the benches and the test suite's CPU report. Light on
 * purpose (no other imports): a test fork loads it before every file.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";

/**
 * The unit of /proc's CPU times (USER_HZ), per second: asked once at start-up, because the child process blocks the
 * event loop for about 20 ms, which inside a measured run (its first reading of the machine's CPU) showed as a stall.
 */
export const TICKS_PER_SECOND = clockTicksPerSecond();
function clockTicksPerSecond(): number {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
}

/** A process's command name and CPU times in µs: its own (user + system) and its reaped children's; undefined when gone. */
export function procStat(pid: number | "self"): { command: string; cpuMicros: number; childrenCpuMicros: number } | undefined {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  const command = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
  // Fields after the command: utime and stime are the line's 14th and 15th, cutime and cstime the 16th and 17th.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
  const micros = (ticks: number) => (ticks / TICKS_PER_SECOND) * 1e6;
  return { command, cpuMicros: micros(fields[11]! + fields[12]!), childrenCpuMicros: micros(fields[13]! + fields[14]!) };
}

/** user + system CPU time of a local process, in µs; undefined when it cannot be read. */
export function procCpuMicros(pid: number): number | undefined {
  return procStat(pid)?.cpuMicros;
}

/** The CPU time (µs) of each of `pids` still running, keyed `<label>:<pid>` (a service's processes, such as Postgres backends). */
export function cpuByProcess(label: string, pids: Iterable<number>): Map<string, number> {
  const cpu = new Map<string, number>();
  for (const pid of pids) {
    const micros = procCpuMicros(pid);
    if (micros !== undefined) cpu.set(`${label}:${pid}`, micros);
  }
  return cpu;
}
