/**
 * Credentials. API keys must be recoverable (POST /fetch_api_key returns the existing key), so they are stored
 * encrypted (AES-256-GCM) beside an HMAC used for lookup and comparison; passwords are stored with scrypt,
 * Node's built-in memory-hard KDF (no native add-on to build, unlike argon2 bindings).
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";

const scrypt = promisify(crypto.scrypt) as (pw: string, salt: Buffer, len: number, opts: crypto.ScryptOptions) => Promise<Buffer>;
/**
 * scrypt's parameters for new password hashes: N = 2^15, about 100 ms of CPU and 32 MiB a hash. Under a test runner
 * (NODE_ENV=test, which vitest sets, and the servers its tests start inherit) N = 2^10, as frameworks lower their
 * password hashers' cost in tests: the suite creates some 600 accounts through the API, and the full cost was about
 * a twentieth of its CPU. A hash carries its own parameters, so every hash verifies with whatever made it.
 */
const SCRYPT = { N: process.env.NODE_ENV === "test" ? 1 << 10 : 1 << 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

export class Keyring {
  private readonly hmacKey: Buffer;
  private readonly aesKey: Buffer;
  private readonly signKey: Buffer;

  constructor(secret: string) {
    this.hmacKey = crypto.createHash("sha256").update(`hmac:${secret}`).digest();
    this.aesKey = crypto.createHash("sha256").update(`aes:${secret}`).digest();
    this.signKey = crypto.createHash("sha256").update(`sign:${secret}`).digest();
  }

  /** The secret from CHORUS_SECRET, else from DATA_DIR/secret.key, created on first use. */
  static load(dataDir: string, secret?: string): Keyring {
    if (secret) return new Keyring(secret);
    const file = path.join(dataDir, "secret.key");
    fs.mkdirSync(dataDir, { recursive: true });
    try {
      fs.writeFileSync(file, crypto.randomBytes(32).toString("hex"), { flag: "wx", mode: 0o600 });
    } catch (err: any) {
      if (err.code !== "EEXIST") throw err;
    }
    return new Keyring(fs.readFileSync(file, "utf8").trim());
  }

  /** A new API key: 32 characters of [A-Za-z0-9], as Zulip's. */
  static newApiKey(): string {
    let key = "";
    while (key.length < 32) {
      const byte = crypto.randomBytes(1)[0]!;
      if (byte < 248) key += KEY_ALPHABET[byte % 62]; // 248 = 4 * 62: no modulo bias
    }
    return key;
  }

  hashApiKey(key: string): string {
    return crypto.createHmac("sha256", this.hmacKey).update(key).digest("hex");
  }

  /** Constant-time comparison of a presented key with the stored hash. */
  apiKeyMatches(key: string, storedHash: string): boolean {
    const a = Buffer.from(this.hashApiKey(key), "hex");
    const b = Buffer.from(storedHash, "hex");
    return a.length === b.length && crypto.timingSafeEqual(a, b);
  }

  /** A MAC of `data` for tokens the server issues and later verifies itself; `purpose` separates their kinds. */
  sign(purpose: string, data: string): string {
    return crypto.createHmac("sha256", this.signKey).update(`${purpose}\0${data}`).digest("base64url");
  }

  encrypt(text: string): string {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv("aes-256-gcm", this.aesKey, iv);
    const body = Buffer.concat([cipher.update(text, "utf8"), cipher.final()]);
    return [iv, cipher.getAuthTag(), body].map((b) => b.toString("base64")).join(".");
  }

  decrypt(sealed: string): string {
    const [iv, tag, body] = sealed.split(".").map((p) => Buffer.from(p, "base64"));
    const decipher = crypto.createDecipheriv("aes-256-gcm", this.aesKey, iv!);
    decipher.setAuthTag(tag!);
    return Buffer.concat([decipher.update(body!), decipher.final()]).toString("utf8");
  }
}

export async function hashPassword(password: string): Promise<string> {
  const salt = crypto.randomBytes(16);
  const hash = await scrypt(password, salt, 32, SCRYPT);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString("base64")}$${hash.toString("base64")}`;
}

export async function verifyPassword(password: string, stored: string | null): Promise<boolean> {
  if (!stored) return false;
  const [scheme, n, r, p, salt, hash] = stored.split("$");
  if (scheme !== "scrypt" || !salt || !hash) return false;
  const expected = Buffer.from(hash, "base64");
  const actual = await scrypt(password, Buffer.from(salt, "base64"), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: SCRYPT.maxmem,
  });
  return crypto.timingSafeEqual(actual, expected);
}

/** Constant-time comparison of two strings (a presented secret with the expected one). */
export function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && crypto.timingSafeEqual(x, y);
}
