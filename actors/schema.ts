/** The whole database as kysely sees it: the kernel's tables and both products'. */
import type { KernelTables } from "../runtime/store/schema.ts";
import type { AssistantTables } from "./assistant/schema.ts";
import type { ChatTables } from "./chat/schema.ts";

export interface Database extends KernelTables, ChatTables, AssistantTables {}
