/**
 * Chat's own tuning, read from the environment in one place (beside runtime/config.ts, which reads the kernel's and
 * the gateway's settings). Read when a node starts; tests pass overrides instead.
 */
import { int, onOff } from "../../runtime/config.ts";

/** How long an event written behind its delivery waits for others to share its commit, by default. */
export const DEFAULT_EVENT_WRITE_DELAY_MS = 10;

/**
 * Past this many recipients a message's flags commit as one list row, expanded into rows after the send (see
 * ./message-log.ts): on PGlite a flag row costs 8-15 µs of the commit, so 100 rows cost about what a separate commit
 * does.
 */
export const DEFAULT_RECIPIENT_LIST_ABOVE = 100;
/** How long after its commit a recipient list is expanded: after the send's deliveries, which it would delay. */
export const DEFAULT_RECIPIENT_LIST_DELAY_MS = 50;

/** Zulip's MAX_FILE_UPLOAD_SIZE default since uploads may be resumed (feature level 296). */
export const DEFAULT_MAX_FILE_UPLOAD_SIZE_MIB = 100;

export interface ChatConfig {
  /** Long-poll heartbeat: a poll that waited this long gets a heartbeat event. */
  heartbeatSeconds: number;
  /** An event queue expires this long after its last poll ended. */
  queueTimeoutSeconds: number;
  /** SMTP server for outgoing e-mail (invitations), e.g. smtp://user:pass@host:587; none: e-mails stay in the outbox. */
  smtpUrl?: string;
  /** From address of outgoing e-mail. */
  mailFrom: string;
  /** Whom users are told to ask for what only the server's operator can do (Zulip's ZULIP_ADMINISTRATOR). */
  administratorEmail: string;
  /**
   * How long an event written behind its delivery waits for others to share its commit (see ./users/user.ts). Tests
   * lengthen it to make sure a crash falls inside that window.
   */
  eventWriteDelayMs: number;
  /** Recipients past which a message's flag rows are written as one list and expanded behind; tests lower it. */
  recipientListAbove: number;
  /** How long a recipient list waits before its expansion; tests lengthen it to read and write around lists. */
  recipientListDelayMs: number;
  /** Zulip's MAX_FILE_UPLOAD_SIZE: the largest file POST /user_uploads takes, in MiB (register's max_file_upload_size_mib). */
  maxFileUploadSizeMib: number;
  /** Each organization's upload quota in MiB (register's realm_upload_quota_mib); undefined: no quota. */
  realmUploadQuotaMib?: number;
  /**
   * Whether Welcome Bot greets each new human account with a direct message, as Zulip does (on by default). Zulip's
   * clients expect a feed that is never empty: zulip-terminal cannot start for a user without a single message.
   */
  welcomeMessages: boolean;
}

export function loadChatConfig(overrides: Partial<ChatConfig> = {}): ChatConfig {
  const env = process.env;
  const mailFrom = overrides.mailFrom ?? env.MAIL_FROM ?? "Chorus <noreply@chorus.example>";
  return {
    heartbeatSeconds: overrides.heartbeatSeconds ?? Math.max(1, int("HEARTBEAT_SECONDS", 50)),
    queueTimeoutSeconds: overrides.queueTimeoutSeconds ?? Math.max(1, int("QUEUE_TIMEOUT_SECONDS", 600)),
    smtpUrl: "smtpUrl" in overrides ? overrides.smtpUrl : env.SMTP_URL || undefined,
    mailFrom,
    administratorEmail: overrides.administratorEmail ?? env.ADMINISTRATOR_EMAIL ?? mailFrom.match(/<([^>]+)>/)?.[1] ?? mailFrom,
    eventWriteDelayMs: overrides.eventWriteDelayMs ?? Math.max(0, int("EVENT_WRITE_DELAY_MS", DEFAULT_EVENT_WRITE_DELAY_MS)),
    recipientListAbove: overrides.recipientListAbove ?? int("RECIPIENT_LIST_ABOVE", DEFAULT_RECIPIENT_LIST_ABOVE),
    recipientListDelayMs: overrides.recipientListDelayMs ?? int("RECIPIENT_LIST_DELAY_MS", DEFAULT_RECIPIENT_LIST_DELAY_MS),
    maxFileUploadSizeMib: overrides.maxFileUploadSizeMib ?? Math.max(1, int("MAX_FILE_UPLOAD_SIZE_MIB", DEFAULT_MAX_FILE_UPLOAD_SIZE_MIB)),
    welcomeMessages: overrides.welcomeMessages ?? onOff("WELCOME_MESSAGES", true),
    realmUploadQuotaMib: "realmUploadQuotaMib" in overrides ? overrides.realmUploadQuotaMib : env.REALM_UPLOAD_QUOTA_MIB ? int("REALM_UPLOAD_QUOTA_MIB", 0) : undefined,
  };
}
