/**
 * Every migration of the database, in order: the kernel's tables, chat's and the assistant's (the store runs this
 * list: `store.migrate(migrations)`). Append-only: a shipped migration is never edited; a change is a new file
 * beside its domain (actors/chat/migrations, actors/assistant/migrations). kysely runs them in the order of their names
 * and records each name as applied, so a name never changes (a file may move).
 */
import type { Migration } from "kysely";
import * as initial from "./2026-11-22T0400-initial.ts";
import * as eventQueues from "../chat/migrations/2026-11-22T0430-event-queues.ts";
import * as messages from "../chat/migrations/2026-11-22T0500-messages.ts";
import * as assistant from "../assistant/migrations/2026-11-22T0600-assistant.ts";
import * as userData from "../chat/migrations/2026-11-22T0700-user-data.ts";
import * as presence from "../chat/migrations/2026-11-22T0710-presence.ts";
import * as pushDevices from "../chat/migrations/2026-11-22T0720-push-devices.ts";
import * as invitations from "../chat/migrations/2026-11-22T0800-invitations.ts";
import * as subscriptionProperties from "../chat/migrations/2026-11-22T0800-subscription-properties.ts";
import * as emailChanges from "../chat/migrations/2026-11-22T0900-email-changes.ts";
import * as userEmailLookup from "../chat/migrations/2026-11-22T0910-user-email-lookup.ts";
import * as customProfileFields from "../chat/migrations/2026-11-23T1900-custom-profile-fields.ts";
import * as inviteLinks from "../chat/migrations/2026-11-23T1900-invite-links.ts";
import * as userApiEmailLookup from "../chat/migrations/2026-11-23T1910-user-api-email-lookup.ts";
import * as realmEmoji from "../chat/migrations/2026-11-23T1930-realm-emoji.ts";
import * as appendFunctions from "../chat/migrations/2026-11-23T2200-append-functions.ts";
import * as userEventsJson from "../chat/migrations/2026-11-24T0000-user-events-json.ts";
import * as appendPlans from "../chat/migrations/2026-11-24T0100-append-plans.ts";
import * as recipientLists from "../chat/migrations/2026-11-24T1000-recipient-lists.ts";
import * as alertWordsStatusMutes from "../chat/migrations/2026-11-26T0300-alert-words-status-mutes.ts";
import * as archivedChannels from "../chat/migrations/2026-11-26T0300-archived-channels.ts";
import * as linkifiersPlaygroundsSnippets from "../chat/migrations/2026-11-26T0300-linkifiers-playgrounds-snippets.ts";
import * as attachments from "../chat/migrations/2026-11-27T2100-attachments.ts";
import * as channelFolders from "../chat/migrations/2026-11-27T2110-channel-folders.ts";
import * as realmUserSettingsDefaults from "../chat/migrations/2026-11-27T2110-realm-user-settings-defaults.ts";
import * as reminders from "../chat/migrations/2026-11-27T2110-reminders.ts";
import * as sendAttempts from "../chat/migrations/2026-11-27T2120-send-attempts.ts";
import * as documentSections from "../assistant/migrations/2026-11-27T2140-document-sections.ts";
import * as passwordResets from "../chat/migrations/2026-11-27T2200-password-resets.ts";
import * as imageAttachments from "../chat/migrations/2026-11-28T0010-image-attachments.ts";
import * as clusterMembership from "./2026-11-28T0050-cluster-membership.ts";
import * as messageSearch from "../chat/migrations/2026-11-28T0100-message-search.ts";
import * as messageReadIndexes from "../chat/migrations/2026-11-28T0110-message-read-indexes.ts";
import * as realmUserVersions from "../chat/migrations/2026-11-28T0120-realm-user-versions.ts";
import * as channelSubscriberCounts from "../chat/migrations/2026-11-28T0130-channel-subscriber-counts.ts";
import * as channelVersions from "../chat/migrations/2026-11-28T0150-channel-versions.ts";
import * as unreadMessages from "../chat/migrations/2026-11-28T0800-unread-messages.ts";
import * as messageSearchDocument from "../chat/migrations/2026-11-28T0900-message-search-document.ts";
import * as messageSearchWords from "../chat/migrations/2026-11-28T1200-message-search-words.ts";
import * as unreadTriggersLinear from "../chat/migrations/2026-11-28T1600-unread-triggers-linear.ts";
import * as unreadRowsByFlagRows from "../chat/migrations/2026-12-01T2330-unread-rows-by-flag-rows.ts";
import * as unreadWalksByUnreadTable from "../chat/migrations/2026-12-02T0330-unread-walks-by-unread-table.ts";
import * as messageVersions from "../chat/migrations/2026-12-02T1800-message-versions.ts";
import * as narrowPartialIndexes from "../chat/migrations/2026-12-05T0400-narrow-partial-indexes.ts";
import * as pendingFanOuts from "../chat/migrations/2026-12-05T0700-pending-fan-outs.ts";
import * as submessages from "../chat/migrations/2026-12-05T1000-submessages.ts";
import * as imageMessagesIndex from "../chat/migrations/2026-12-05T0800-image-messages-index.ts";
import * as messageScopedSearch from "../chat/migrations/2026-12-05T1600-message-scoped-search.ts";
import * as realmSearchLanguage from "../chat/migrations/2026-12-05T2100-realm-search-language.ts";

export const migrations: Record<string, Migration> = {
  "2026-11-22T0400-initial": initial,
  "2026-11-22T0430-event-queues": eventQueues,
  "2026-11-22T0500-messages": messages,
  "2026-11-22T0600-assistant": assistant,
  "2026-11-22T0700-user-data": userData,
  "2026-11-22T0710-presence": presence,
  "2026-11-22T0720-push-devices": pushDevices,
  "2026-11-22T0800-invitations": invitations,
  "2026-11-22T0800-subscription-properties": subscriptionProperties,
  "2026-11-22T0900-email-changes": emailChanges,
  "2026-11-22T0910-user-email-lookup": userEmailLookup,
  "2026-11-23T1900-custom-profile-fields": customProfileFields,
  "2026-11-23T1900-invite-links": inviteLinks,
  "2026-11-23T1910-user-api-email-lookup": userApiEmailLookup,
  "2026-11-23T1930-realm-emoji": realmEmoji,
  "2026-11-23T2200-append-functions": appendFunctions,
  "2026-11-24T0000-user-events-json": userEventsJson,
  "2026-11-24T0100-append-plans": appendPlans,
  "2026-11-24T1000-recipient-lists": recipientLists,
  "2026-11-26T0300-alert-words-status-mutes": alertWordsStatusMutes,
  "2026-11-26T0300-archived-channels": archivedChannels,
  "2026-11-26T0300-linkifiers-playgrounds-snippets": linkifiersPlaygroundsSnippets,
  "2026-11-27T2100-attachments": attachments,
  "2026-11-27T2110-channel-folders": channelFolders,
  "2026-11-27T2110-realm-user-settings-defaults": realmUserSettingsDefaults,
  "2026-11-27T2110-reminders": reminders,
  "2026-11-27T2120-send-attempts": sendAttempts,
  "2026-11-27T2140-document-sections": documentSections,
  "2026-11-27T2200-password-resets": passwordResets,
  "2026-11-28T0010-image-attachments": imageAttachments,
  "2026-11-28T0050-cluster-membership": clusterMembership,
  "2026-11-28T0100-message-search": messageSearch,
  "2026-11-28T0110-message-read-indexes": messageReadIndexes,
  "2026-11-28T0120-realm-user-versions": realmUserVersions,
  "2026-11-28T0130-channel-subscriber-counts": channelSubscriberCounts,
  "2026-11-28T0150-channel-versions": channelVersions,
  "2026-11-28T0800-unread-messages": unreadMessages,
  "2026-11-28T0900-message-search-document": messageSearchDocument,
  "2026-11-28T1200-message-search-words": messageSearchWords,
  "2026-11-28T1600-unread-triggers-linear": unreadTriggersLinear,
  "2026-12-01T2330-unread-rows-by-flag-rows": unreadRowsByFlagRows,
  "2026-12-02T0330-unread-walks-by-unread-table": unreadWalksByUnreadTable,
  "2026-12-02T1800-message-versions": messageVersions,
  "2026-12-05T0400-narrow-partial-indexes": narrowPartialIndexes,
  "2026-12-05T0700-pending-fan-outs": pendingFanOuts,
  "2026-12-05T0800-image-messages-index": imageMessagesIndex,
  "2026-12-05T1000-submessages": submessages,
  "2026-12-05T1600-message-scoped-search": messageScopedSearch,
  "2026-12-05T2100-realm-search-language": realmSearchLanguage,
};
