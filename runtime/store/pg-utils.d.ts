/** node-postgres's own parameter preparation (pg/lib/utils.js), which @types/pg does not declare. */
declare module "pg/lib/utils.js" {
  /** A JavaScript value as node-postgres sends it as a parameter: text, a Buffer (sent binary), or null. */
  export function prepareValue(value: unknown): string | Buffer | null;
}
