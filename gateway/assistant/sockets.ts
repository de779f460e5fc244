/**
 * The mobile chat's realtime events: socket.io attached to the same uWS app as HTTP (under /socket.io/).
 * Clients authenticate with `auth: {token}`, an operator's API key or a user token, and `join-conversation` a
 * session they may use (an operator: of their organization; a user token: their own), acknowledged with
 * `{ok: true, session_id}` or `{error: {code, message}}`. While an answer is produced the room gets
 * `bot-typing`, then `message-streaming` pieces `{session_id, delta, seq}`, then `message-complete` with the full
 * text and sources.
 *
 * Rooms are per process, and the answer may be produced on another worker than the one a client is connected
 * to: every room event is published on one pub/sub channel (runtime/transport/pubsub.ts) and each node emits what
 * it hears to its own rooms, its own events included, so every node emits a publisher's events in the order they
 * were published. Pub/sub is at most once, like a socket: a client that reconnects reads the history
 * (GET /chat/sessions/{id}/messages).
 */
import { Server, type Socket } from "socket.io";
import { sessionById } from "../../actors/assistant/reads.ts";
import type { Answered } from "../../actors/assistant/agent-session.protocol.ts";
import { ChorusError } from "../../runtime/errors.ts";
import type { PubSub } from "../../runtime/transport/pubsub.ts";
import { channels } from "../../runtime/transport/redis-keys.ts";
import type { HttpServer } from "../http.ts";
import type { AssistantServices, AssistantSockets } from "./app.ts";
import { isUuid } from "./app.ts";
import { callerMayUse, type MobileCaller } from "./auth.ts";
import { answerPieces } from "./sse.ts";
import { log } from "../../runtime/log.ts";
import { gauges } from "../../runtime/metrics.ts";


const room = (sessionId: string) => `session:${sessionId}`;

function streaming(sessionId: string, messageId: string, delta: string, seq: number) {
  return ["message-streaming", { session_id: sessionId, message_id: messageId, delta, seq }] as const;
}

function completion(answered: Answered) {
  return [
    "message-complete",
    {
      session_id: answered.session_id,
      message_id: answered.reply.id,
      content: answered.reply.content,
      sources: answered.reply.sources,
      in_reply_to: answered.message.id,
    },
  ] as const;
}

/** A room event as socket.io events. A finished answer is heard as its pieces, then the whole. */
function socketEvents(event: RoomEvent): Array<readonly [string, unknown]> {
  switch (event.kind) {
    case "typing":
      return [["bot-typing", { session_id: event.sessionId }]];
    case "delta":
      return [streaming(event.sessionId, event.messageId, event.delta, event.seq)];
    case "complete":
      return [completion(event.answered)];
    case "answer": {
      const a = event.answered;
      return [...answerPieces(a.reply.content).map((d, i) => streaming(a.session_id, a.reply.id, d, i + 1)), completion(a)];
    }
  }
}

type RoomEvent =
  | { kind: "typing"; sessionId: string }
  | { kind: "delta"; sessionId: string; messageId: string; delta: string; seq: number }
  | { kind: "complete"; answered: Answered }
  | { kind: "answer"; answered: Answered };

export function attachSockets(app: HttpServer["app"], services: AssistantServices, pubsub: PubSub): AssistantSockets {
  const io = new Server({ serveClient: false, cors: { origin: false } });
  io.attachApp(app);

  io.use((socket, next) => {
    const token = socket.handshake.auth?.token;
    if (typeof token !== "string" || !token) return next(new Error("unauthorized: send auth.token (an API key or a user token)"));
    services.operators.byBearer(token).then(
      (caller) => {
        socket.data.caller = caller;
        next();
      },
      () => next(new Error("unauthorized: invalid API key or user token")),
    );
  });

  io.on("connection", (socket: Socket) => {
    socket.on("join-conversation", async (payload: unknown, ack?: (reply: unknown) => void) => {
      const reply = typeof ack === "function" ? ack : () => {};
      const sessionId = typeof payload === "string" ? payload : (payload as { session_id?: unknown } | null)?.session_id;
      try {
        if (!isUuid(sessionId)) throw new ChorusError("BAD_REQUEST", "session_id must be a UUID", 400);
        const session = await sessionById(services.store.db, sessionId.toLowerCase());
        if (!session || !callerMayUse(socket.data.caller as MobileCaller, session)) throw new ChorusError("NOT_FOUND", "Session not found", 404);
        await socket.join(room(session.id));
        reply({ ok: true, session_id: session.id });
      } catch (err) {
        const error = ChorusError.wrap(err);
        reply({ error: { code: error.code, message: error.message } });
      }
    });
  });

  /**
   * Emit to the local members of a session's room, each socket's events inside its uWS cork: engine.io's uWS
   * websocket transport sends without corking, and uWS holds uncorked sends made outside its own callbacks (these
   * come from a pub/sub message) until something else wakes its loop.
   */
  const emitLocally = (event: RoomEvent) => {
    const sessionId = "answered" in event ? event.answered.session_id : event.sessionId;
    const members = io.sockets.adapter.rooms.get(room(sessionId));
    if (!members?.size) return;
    const events = socketEvents(event);
    for (const id of members) {
      const socket = io.sockets.sockets.get(id);
      if (!socket) continue;
      const send = () => {
        for (const [name, data] of events) socket.emit(name, data);
      };
      const transport = socket.conn.transport as unknown as { name: string; socket?: { cork(cb: () => void): void } };
      if (transport.name === "websocket" && transport.socket?.cork) transport.socket.cork(send);
      else send();
    }
  };

  const relay = (text: string) => {
    try {
      emitLocally(JSON.parse(text) as RoomEvent);
    } catch (err) {
      log.error({ err }, "sockets: bad room event");
    }
  };
  void pubsub.subscribe(channels.assistantRoomEvents, relay).catch((err) => log.error({ err }, "sockets: subscribing to room events failed"));
  const publish = (event: RoomEvent) => {
    pubsub.publish(channels.assistantRoomEvents, JSON.stringify(event)).catch((err) => log.error({ err }, "sockets: publishing a room event failed"));
  };

  const unsample = gauges.sockets.add(() => io.engine.clientsCount);
  return {
    typing: (sessionId) => publish({ kind: "typing", sessionId }),
    publishAnswer: (answered) => publish({ kind: "answer", answered }),
    publishDelta: (sessionId, messageId, delta, seq) => publish({ kind: "delta", sessionId, messageId, delta, seq }),
    publishComplete: (answered) => publish({ kind: "complete", answered }),
    close: () =>
      new Promise<void>((resolve) => {
        unsample();
        void pubsub.unsubscribe(channels.assistantRoomEvents, relay);
        io.close(() => resolve());
        // io.close waits for the HTTP server it does not have under attachApp; do not hang on it
        setTimeout(resolve, 100).unref();
      }),
  };
}
