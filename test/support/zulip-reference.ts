/**
 * Zulip's reference files (`shared/zulip/` beside the repository: zulip.yaml, the markdown corpus). CI has them; a
 * fresh clone does not, and its suite must still pass: checks that need a file run when it is there and are skipped
 * with {@link ZULIP_REFERENCE_MISSING} as the reason when it is not (global-setup.ts says so once per run).
 * Paths are relative to this module, not the cwd.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const ZULIP_REFERENCE_DIR = fileURLToPath(new URL("../../../shared/zulip/", import.meta.url));

/** Absolute path of one reference file, e.g. `zulip.yaml`. */
export function zulipReferencePath(name: string): string {
  return ZULIP_REFERENCE_DIR + name;
}

/** Whether the reference file is present. */
export function hasZulipReference(name: string): boolean {
  return existsSync(zulipReferencePath(name));
}

export const ZULIP_REFERENCE_MISSING =
  `Zulip's reference files are not at ${ZULIP_REFERENCE_DIR} (a clone without ../shared): ` +
  "checks against Zulip's OpenAPI description and markdown corpus are skipped, responses are not schema-validated";
