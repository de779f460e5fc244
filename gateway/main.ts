/**
 * The composition root. `startNode` wires one process (store, transport, actor system, shard manager, HTTP);
 * `main` runs one node, or with WORKERS > 1 a primary that prepares the store and forks the workers, which all
 * listen on the same port (uWS uses SO_REUSEPORT) and share the shards.
 */
// First: refuses an unsupported Node before uWebSockets.js loads (see the module).
import "./supported-node.ts";
import cluster from "node:cluster";
import fs from "node:fs";
import path from "node:path";
import v8 from "node:v8";
import { pathToFileURL } from "node:url";
import { ConfigError, loadConfig, type Config } from "../runtime/config.ts";
import { Keyring } from "../runtime/secrets.ts";
import { keepRunningOnUnhandledRejections } from "../runtime/unhandled.ts";
import type { Store } from "../runtime/store/store.ts";
import { ActorSystem } from "../runtime/system.ts";
import { ShardManager } from "../runtime/cluster.ts";
import { MemoryTransport } from "../runtime/transport/memory.ts";
import { MemoryPubSub } from "../runtime/transport/memory-pubsub.ts";
import type { PubSub } from "../runtime/transport/pubsub.ts";
import { RedisPubSub } from "../runtime/transport/redis-pubsub.ts";
import { defaultPeerLinksDir, PeerLinks } from "../runtime/transport/peer-links.ts";
import { RedisStreamsTransport } from "../runtime/transport/redis-streams.ts";
import type { Transport } from "../runtime/transport/transport.ts";
import { actorKinds } from "../actors/index.ts";
import { WebhookDelivery } from "../actors/assistant/webhooks.ts";
import { MailSender } from "../actors/chat/organization/mail.ts";
import { loadAssistantConfig } from "../actors/assistant/config.ts";
import { assistantFace } from "./assistant/index.ts";
import { MessageIds, type ActorDeps } from "../actors/deps.ts";
import type { MessageLog } from "../actors/chat/message-log.ts";
import { loadChatConfig, type ChatConfig } from "../actors/chat/config.ts";
import { App, envelope, type Services } from "./chat/app.ts";
import { errorResult } from "./assistant/app.ts";
import { ChorusError } from "../runtime/errors.ts";
import { Authenticator } from "./auth.ts";
import { startHttpServer, type HttpHandler } from "./http.ts";
import { withAccessLog } from "./access-log.ts";
import { answerPrimaryForMetrics, serveClusterMetrics, serveMetrics, withMetrics } from "./metrics.ts";
import { withServerSpan } from "./tracing.ts";
import { gauges, setMetricsEnabled } from "../runtime/metrics.ts";
import { sampleEventQueues } from "../actors/chat/users/user.ts";
import { log } from "../runtime/log.ts";
import { healthProbes } from "./health.ts";
import { RateLimiter } from "./rate-limiter.ts";
import { ChatRateLimits } from "./chat/rate-limits.ts";
import { startTelemetry } from "./telemetry.ts";
import { lockDataDir } from "./lock.ts";
import { preflight } from "./preflight.ts";
import { openStore, prepareStore, siteFor, writeZuliprc } from "./prepare.ts";
import { channelRoutes } from "./chat/channels.ts";
import { eventRoutes } from "./chat/events.ts";
import { messageRoutes } from "./chat/messages.ts";
import { reactionRoutes } from "./chat/reactions.ts";
import { submessageRoutes } from "./chat/submessages.ts";
import { scheduledRoutes } from "./chat/scheduled.ts";
import { topicRoutes } from "./chat/topics.ts";
import { wakeSchedulers } from "../actors/chat/conversations/scheduler.ts";
import { redeliverLeftFanOuts } from "../actors/chat/conversations/fan-outs.ts";
import { onRealmEmojiNotice } from "../actors/chat/organization/realm-emoji.ts";
import { Realm } from "../actors/chat/organization/realm.protocol.ts";
import { compiledLinkifiers } from "../actors/chat/organization/linkifiers.ts";
import { realmAlertWords } from "../actors/chat/users/alert-words.ts";
import { usersMutingCache } from "../actors/chat/users/user-data.ts";
import { serverRoutes } from "./chat/server.ts";
import { userRoutes } from "./chat/users.ts";
import { typingRoutes } from "./chat/typing.ts";
import { meRoutes } from "./chat/me.ts";
import { profileFieldRoutes } from "./chat/profile-fields.ts";
import { organizationRoutes } from "./chat/organization.ts";
import { emojiRoutes, isEmojiDataPath, isEmojiImagePath, serveEmojiData, serveEmojiImage } from "./chat/emoji.ts";
import { linkifierRoutes } from "./chat/linkifiers.ts";
import { userGroupRoutes } from "./chat/user-groups.ts";
import { isUploadPath, isUploadRequest, serveUpload, uploadRoutes } from "./chat/uploads.ts";
import { thumbnailPending } from "./chat/thumbnails.ts";
import { LocalDirectoryBlobStore } from "../runtime/blobs/local-directory.ts";
import { passwordResetRoutes } from "./chat/password-reset.ts";
import { isPagePath, servePage, warmAssets } from "./pages/routes.ts";
import type { Database } from "../actors/schema.ts";

/** The metrics' switch, for the bench: it drives the build of this module, whose copy of runtime/metrics.ts is its own. */
export { setMetricsEnabled };

export interface RunningNode {
  port: number;
  config: Config;
  store: Store<Database>;
  messageLog: MessageLog;
  system: ActorSystem;
  /** Graceful: stop accepting, finish turns, release leases, close connections. */
  close(): Promise<void>;
}

/** What a cluster worker tells the primary once it serves (a worker that exits before that failed to start). */
const WORKER_SERVING = "chorus:serving";

/** A worker-only process's answer to everything but its probes: 404 in the face's own envelope. */
function notServedHere(path: string) {
  const error = new ChorusError("NOT_FOUND", "This process hosts actors only (ROLE=worker): send requests to a gateway", 404);
  return isZulipPath(path) ? envelope(error) : errorResult(error);
}

/** /api/v1/… is the Zulip face; every other path (embed, internal, mobile) is the assistant's. */
const isZulipPath = (path: string) => path.startsWith("/api/v1/");

/**
 * V8's allocation-site pretenuring watches which allocation sites' objects survive young-generation GCs and, once
 * nearly all of one site's do, allocates that site's objects in the old generation from then on. A server meets
 * that early: a thousand long-polls parked at once all survive, and so does whatever the first requests make. After
 * that every request allocated some of its objects old, and those, dead within a millisecond but collected only by
 * the next full GC, held the request's young objects alive through every scavenge, to be copied and promoted
 * themselves. Measured in the wake benchmark (1,000 sends a second, 1,000 polls parked, `--trace-gc-nvp`): 1.34 MB
 * promoted per scavenge and 3.2 ms scavenges with pretenuring, 0.33 MB and 1.4 ms without; wake p99 3.3-3.9 ms in
 * the runs that had no full GC. Set here, before the node allocates anything of its own, rather than on the command
 * line, so that it holds however the process was started (npm start, a cluster worker, the benchmarks, the tests);
 * V8 reads it at each scavenge, so setting it after start-up takes effect (the figures above were measured so).
 * The young generation's size is not like that: V8 sizes it when the process starts, so `--max-semi-space-size=64`
 * is on the command line of `npm start` and `npm run bench` (package.json; cluster workers inherit it).
 */
function tuneGarbageCollection(): void {
  v8.setFlagsFromString("--no-allocation-site-pretenuring");
}

/** The first owner, created by this start (prepareStore). */
type CreatedOwner = { realmId: number; userId: number; email: string; apiKey: string };

/** How the primary of several workers tells its first worker whom Welcome Bot should greet: `<realm id>:<user id>`. */
const WELCOME_OWNER = "CHORUS_WELCOME_OWNER";

function ownerToWelcome(): { realmId: number; userId: number } | undefined {
  const m = /^(\d+):(\d+)$/.exec(process.env[WELCOME_OWNER] ?? "");
  return m ? { realmId: Number(m[1]), userId: Number(m[2]) } : undefined;
}

export async function startNode(config: Config, opts: { workerIndex?: number; prepared?: boolean; chat?: ChatConfig } = {}): Promise<RunningNode> {
  tuneGarbageCollection();
  const unlock = config.databaseUrl ? () => {} : lockDataDir(config.dataDir);
  const keyring = Keyring.load(config.dataDir, config.secret);
  let store: Store<Database>;
  let messageLog: MessageLog;
  let owner: CreatedOwner | undefined;
  const chat = opts.chat ?? loadChatConfig();
  if (opts.prepared) ({ store, messageLog } = await openStore(config, chat));
  else ({ store, messageLog, owner } = await prepareStore(config, keyring, chat));

  // The pub/sub engine matches the transport: in-process for one process, Redis for many workers.
  let transport: Transport;
  let pubsub: PubSub;
  if (config.redisUrl) {
    transport = new RedisStreamsTransport({ url: config.redisUrl, prefix: config.redisPrefix });
    pubsub = new RedisPubSub({ url: config.redisUrl, prefix: config.redisPrefix, name: transport.nodeId });
  } else {
    transport = new MemoryTransport();
    pubsub = new MemoryPubSub();
  }
  let system: ActorSystem;
  const deps: ActorDeps = { store, messageLog, keyring, config, chat, ids: new MessageIds(messageLog), system: () => system };
  const assistantConfig = loadAssistantConfig();
  const webhooks = new WebhookDelivery(store, keyring, assistantConfig);
  // Workers of this host reach each other directly for the asks that need no transport entry.
  const peers = config.redisUrl && config.peerLinksDir ? new PeerLinks({ nodeId: transport.nodeId, directory: config.peerLinksDir }) : undefined;
  system = new ActorSystem({ transport, pubsub, peers, shards: config.shards, kinds: actorKinds(deps, { config: assistantConfig, wakeWebhooks: () => webhooks.wake() }), askTimeoutMs: config.askTimeoutMs });
  await system.start();
  const hostsActors = config.role !== "gateway";
  const shards = hostsActors
    ? new ShardManager(store, system, {
        node: transport.nodeId,
        shards: config.shards,
        leaseSeconds: config.leaseSeconds,
        takeOverAtStart: !config.redisUrl,
        renewer: config.databaseUrl ? { databaseUrl: config.databaseUrl, stallSeconds: config.leaseStallSeconds } : undefined,
        peers: pubsub,
      })
    : undefined;
  await shards?.start();
  // Scheduled messages wait in the store; their actors must be woken after a restart or a shard move.
  const stopWakingSchedulers = hostsActors ? wakeSchedulers(system, store) : () => {};
  // Sends come to their conversations without a transport entry where this process holds them: a fan-out a crashed
  // holder left is found in the store instead.
  const stopRedeliveringFanOuts = hostsActors && transport.redeliversAfterCrash ? redeliverLeftFanOuts(system, store, messageLog) : () => {};

  let port = config.port;
  const auth = new Authenticator(store.db, keyring, (notice) => system.announce(notice), config.authCacheMs);
  system.onNotice((notice) => {
    auth.onNotice(notice);
    onRealmEmojiNotice(notice);
    compiledLinkifiers.onNotice(notice);
    realmAlertWords.onNotice(notice);
    usersMutingCache.onNotice(notice);
  });
  const rateLimiter = new RateLimiter({ redisUrl: config.redisUrl, prefix: config.redisPrefix });
  const services: Services = {
    rateLimits: new ChatRateLimits(rateLimiter, config.rateLimits),
    system,
    store,
    blobs: new LocalDirectoryBlobStore(config.uploadsDir),
    keyring,
    config,
    chat,
    auth,
    siteUrl: (host) => process.env.SITE_URL ?? (host ? `http://${host}` : siteFor(config, port)),
  };
  const app = new App(services);
  app.add(...serverRoutes, ...userRoutes, ...channelRoutes, ...messageRoutes, ...reactionRoutes, ...submessageRoutes, ...scheduledRoutes, ...topicRoutes, ...eventRoutes, ...typingRoutes, ...meRoutes, ...organizationRoutes, ...profileFieldRoutes, ...emojiRoutes, ...linkifierRoutes, ...userGroupRoutes, ...uploadRoutes, ...passwordResetRoutes);
  const probes = healthProbes({ store, shards, redisUrl: config.redisUrl });
  const assistant = assistantFace({ system, store, keyring, config, assistant: assistantConfig, pubsub, rateLimiter });
  const handler: HttpHandler = (req) => {
    if (isZulipPath(req.path)) return app.handle(req);
    if (isEmojiDataPath(req.path)) {
      req.route = "/static/generated/emoji/{file}";
      return serveEmojiData(req);
    }
    if (isEmojiImagePath(req.path)) {
      req.route = "/user_avatars/{path}";
      return serveEmojiImage(store, req);
    }
    if (isUploadPath(req.path)) {
      req.route = "/user_uploads/{path}";
      return serveUpload(services, req);
    }
    return isPagePath(req.path) ? servePage(services, req) : assistant.app.handle(req);
  };
  // Innermost first: the access line and the histogram see the same answer, inside the request's span (whose trace id
  // the access line then carries).
  const counted = config.metrics ? withMetrics(handler) : handler;
  const observed = withServerSpan(config.accessLog ? withAccessLog(counted, opts.workerIndex ?? 0) : counted);
  setMetricsEnabled(config.metrics);
  const unsample = [sampleEventQueues(system)];
  if (transport instanceof RedisStreamsTransport) {
    const streams = transport;
    unsample.push(
      gauges.streamPending.add(async () => (await streams.backlog()).pending),
      gauges.streamLag.add(async () => (await streams.backlog()).lag),
    );
  }
  const http = await startHttpServer({
    host: config.host,
    port: config.port,
    maxBodyBytes: config.maxBodyBytes,
    // Probes and /metrics first: they are called every few seconds, and their lines would drown the access log. A
    // worker-only process answers nothing else: its actors are reached through the transport.
    handler: (req) => probes.handle(req) ?? (config.metrics ? serveMetrics(req) : undefined) ?? (config.role === "worker" ? notServedHere(req.path) : observed(req)),
    streamedBody: isUploadRequest,
    refusal: (path, status, message) => {
      const error = new ChorusError("BAD_REQUEST", message, status);
      const result = isZulipPath(path) ? envelope(error) : errorResult(error);
      return { ...result, headers: { ...result.headers, connection: "close" } };
    },
  });
  assistant.attach(http);
  if (hostsActors) webhooks.start();
  const mail = hostsActors && chat.smtpUrl ? new MailSender(store, { smtpUrl: chat.smtpUrl, from: chat.mailFrom }) : undefined;
  mail?.start();
  port = http.port;
  // One worker looks for images a stopped process left without thumbnails (several would make them twice).
  if (!opts.workerIndex) thumbnailPending(services).catch((err) => log.warn({ err }, "looking for images to thumbnail failed"));

  if (owner) {
    const file = path.join(config.dataDir, "zuliprc");
    writeZuliprc(file, owner.email, owner.apiKey, siteFor(config, port));
    log.info(`created the organization; the owner's credentials are in ${file}`);
  }
  // The first owner was created before any actor existed (here, or by the primary of several workers, which tells
  // its first worker): Welcome Bot greets them now, once (the realm actor's send key names the account).
  const welcomed = owner ?? ownerToWelcome();
  if (welcomed && chat.welcomeMessages) {
    await system
      .ref(Realm, welcomed.realmId)
      .ask({ op: "welcomeUser", userId: welcomed.userId })
      .catch((err) => log.warn({ err }, "Welcome Bot's message to the owner failed"));
  }

  let closing: Promise<void> | undefined;
  return {
    port,
    config,
    store,
    messageLog,
    system,
    close() {
      closing ??= (async () => {
        http.stopListening();
        stopWakingSchedulers();
        stopRedeliveringFanOuts();
        await webhooks.close();
        await mail?.close();
        await assistant.close();
        await rateLimiter.close();
        probes.close();
        for (const remove of unsample) remove();
        await shards?.stop();
        await system.close();
        await transport.close();
        await pubsub.close();
        http.close();
        await store.close();
        unlock();
      })();
      return closing;
    },
  };
}

/** A worker that exits before it serves is started again after a delay that doubles, at most this many times. */
const WORKER_START_ATTEMPTS = 5;
const WORKER_RESTART_DELAY_MS = 500;
/** A worker told to stop that has not closed (shards released, store closed) by then exits with status 1. */
const SHUTDOWN_TIMEOUT_MS = 15_000;

/** `.env` in the working directory, if present; variables already set in the environment win. */
function loadDotEnv(): void {
  if (fs.existsSync(".env")) process.loadEnvFile(".env");
}

async function main(): Promise<void> {
  keepRunningOnUnhandledRejections();
  if (cluster.isPrimary) loadDotEnv();
  const config = loadConfig();
  if (cluster.isPrimary) await preflight(config);
  const telemetry = await startTelemetry();
  if (config.workers > 1 && cluster.isPrimary) {
    const keyring = Keyring.load(config.dataDir, config.secret);
    const { store, owner } = await prepareStore(config, keyring);
    await store.close();
    if (owner) {
      const file = path.join(config.dataDir, "zuliprc");
      writeZuliprc(file, owner.email, owner.apiKey, siteFor(config, config.port));
      log.info(`created the organization; the owner's credentials are in ${file}`);
    }
    let stopping = false;
    // The workers' metrics, gathered (see gateway/metrics.ts); closed with them, or the primary would not exit.
    const stopMetrics = config.metrics ? serveClusterMetrics(config.host, config.metricsPort) : () => {};
    const stop = () => {
      stopping = true;
      stopMetrics();
      for (const w of Object.values(cluster.workers ?? {})) w?.process.kill("SIGTERM");
    };
    // Consecutive failed starts per worker: a worker that never came up is retried with back-off, then given up on
    // (with the whole server), rather than restarted every half second forever.
    const failedStarts = new Map<number, number>();
    // The workers forked here share this host: they link to each other directly unless PEER_LINKS_DIR says otherwise.
    const links = config.redisUrl && config.peerLinksDir === undefined ? { PEER_LINKS_DIR: defaultPeerLinksDir() } : {};
    const fork = (index: number) => {
      const worker = cluster.fork({ WORKER_INDEX: String(index), ...links, ...(owner && index === 0 ? { [WELCOME_OWNER]: `${owner.realmId}:${owner.userId}` } : {}) });
      let serving = false;
      worker.on("message", (msg: unknown) => {
        if (msg === WORKER_SERVING) {
          serving = true;
          failedStarts.set(index, 0);
        }
      });
      worker.on("exit", (code, signal) => {
        if (stopping) return;
        const failures = serving ? 0 : (failedStarts.get(index) ?? 0) + 1;
        failedStarts.set(index, failures);
        if (failures >= WORKER_START_ATTEMPTS) {
          log.fatal(`worker ${index} failed to start ${failures} times in a row (last exit ${signal ?? code}); giving up`);
          process.exitCode = 1;
          stop();
          return;
        }
        const delay = WORKER_RESTART_DELAY_MS * 2 ** Math.max(0, failures - 1);
        log.error(`worker ${index} exited (${signal ?? code})${serving ? "" : " before serving"}; restarting it in ${delay} ms`);
        setTimeout(() => fork(index), delay);
      });
    };
    for (let i = 0; i < config.workers; i++) fork(i);
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    log.info(`${config.workers} workers on port ${config.port}`);
    return;
  }
  const workerIndex = Number(process.env.WORKER_INDEX ?? 0);
  if (cluster.isWorker && config.metrics) answerPrimaryForMetrics();
  // Bundled at start-up here (tests build on the first page asked for), so a broken page script shows at once.
  await warmAssets();
  const node = await startNode(config, { workerIndex, prepared: cluster.isWorker });
  process.send?.(WORKER_SERVING);
  log.info(
    `worker ${workerIndex} listening on port ${node.port} (pid ${process.pid}, node ${node.system.nodeId}, role ${config.role}, ${config.redisUrl ? "redis-streams" : "memory"} transport, ${node.store.engine})`,
  );
  const shutdown = async (signal: string) => {
    log.info(`${signal}: shutting down worker ${workerIndex}`);
    const timer = setTimeout(() => {
      log.fatal(`worker ${workerIndex} did not shut down within ${SHUTDOWN_TIMEOUT_MS} ms; exiting`);
      process.exit(1);
    }, SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    try {
      await node.close();
      await telemetry?.shutdown();
    } catch (err) {
      log.fatal({ err }, `worker ${workerIndex}: shutting down failed`);
      process.exit(1);
    }
    process.exit(0);
  };
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
  process.once("SIGINT", () => void shutdown("SIGINT"));
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main().catch((err: unknown) => {
    // One line per problem; the stack only when asked for (LOG_LEVEL=debug), as it names our code, not the cause.
    const lines = err instanceof ConfigError ? err.problems : [`failed to start: ${(err as Error)?.message ?? String(err)}`];
    for (const line of lines) process.stderr.write(`chorus: ${line}\n`);
    if (process.env.LOG_LEVEL === "debug") console.error(err);
    process.exit(1);
  });
}
