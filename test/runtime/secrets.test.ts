/**
 * Password hashes (runtime/secrets.ts): the full scrypt cost outside a test runner, the lowered one inside it, and
 * every hash verifies whatever its parameters.
 */
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { hashPassword, verifyPassword } from "../../runtime/secrets.ts";

/** The parameters of a hash made by a process with `nodeEnv` as NODE_ENV (unset: none). */
async function paramsOfHashMadeWith(nodeEnv: string | undefined): Promise<string> {
  const env = { ...process.env };
  if (nodeEnv === undefined) delete env.NODE_ENV;
  else env.NODE_ENV = nodeEnv;
  const script = `import("./runtime/secrets.ts").then(async (s) => console.log(await s.hashPassword("pw")))`;
  const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", "-e", script], { env, cwd: new URL("../..", import.meta.url) });
  return stdout.trim().split("$").slice(0, 4).join("$");
}

it("hashes with N = 2^15 in production and N = 2^10 under a test runner", async () => {
  expect(await paramsOfHashMadeWith(undefined)).toBe("scrypt$32768$8$1");
  expect(await paramsOfHashMadeWith("production")).toBe("scrypt$32768$8$1");
  expect(await paramsOfHashMadeWith("test")).toBe("scrypt$1024$8$1");
}, 30_000);

it("verifies a hash by its own parameters, so hashes of either cost verify anywhere", async () => {
  // A hash as production makes it (N = 2^15), with a salt of zeros.
  const key = crypto.scryptSync("secret", Buffer.alloc(16), 32, { N: 32768, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
  const strong = `scrypt$32768$8$1$${Buffer.alloc(16).toString("base64")}$${key.toString("base64")}`;
  expect(await verifyPassword("secret", strong)).toBe(true);
  expect(await verifyPassword("wrong", strong)).toBe(false);
  const made = await hashPassword("secret");
  expect(await verifyPassword("secret", made)).toBe(true);
  expect(await verifyPassword("wrong", made)).toBe(false);
});
