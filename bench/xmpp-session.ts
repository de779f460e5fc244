/**
 * The fan-out bench's XMPP client (bench/fanout-client.ts, transport "xmpp"): one occupant of a multi-user chat room
 * on the reference peer (bench/xmpp-peer.ts), on a TCP connection of its own.
 *
 * Written here rather than taken from @xmpp/client: the bench needs five steps of the protocol (stream, SASL
 * ANONYMOUS, resource binding, joining the room, groupchat messages), and the members of a cell share the
 * load generator's one process with as many as 2,000 connections at up to 50,000 deliveries/s on the same two cores as
 * the server. @xmpp/client builds an element tree for every stanza; a member here only looks for its message bodies
 * in the bytes, which keeps the load generator's CPU per delivery near the other transports'.
 */
import net from "node:net";

export interface XmppSession {
  /** Send one groupchat message to the room. */
  say(body: string): void;
  close(): void;
}

export interface XmppRoom {
  host: string;
  port: number;
  /** The room's address, room@service. */
  room: string;
}

/** The address a fan-out client is given for a room of the reference peer (the `base` of its requests). */
export function xmppRoomUrl(room: XmppRoom): string {
  return `xmpp://${room.host}:${room.port}/${room.room}`;
}

export function xmppRoom(base: string): XmppRoom {
  const url = new URL(base);
  return { host: url.hostname, port: Number(url.port), room: decodeURIComponent(url.pathname.slice(1)) };
}

const STREAM_OPEN = (domain: string) =>
  `<?xml version='1.0'?><stream:stream to='${domain}' xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>`;

/** Resolves once the room confirmed the occupant (its own presence, status 110); then every complete message stanza goes to `onMessages`. */
export function joinRoom(
  target: XmppRoom,
  nick: string,
  handlers: { onMessages(stanzas: string, at: number): void; onError(reason: string): void },
): Promise<XmppSession> {
  const domain = target.room.slice(target.room.indexOf("@") + 1).replace(/^[^.]+\./, "");
  return new Promise((resolve, reject) => {
    const socket = net.connect(target.port, target.host);
    socket.setNoDelay(true);
    socket.setEncoding("utf8");
    let buffered = "";
    // The handshake: each step waits for the text that ends the server's answer, then sends the next request.
    const handshake: Array<{ step: string; awaits: string; then: string }> = [
      { step: "features", awaits: "</stream:features>", then: "<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='ANONYMOUS'/>" },
      { step: "sasl", awaits: "<success", then: STREAM_OPEN(domain) },
      { step: "bound-features", awaits: "</stream:features>", then: "<iq type='set' id='bind'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/></iq>" },
      { step: "bind", awaits: "</iq>", then: `<presence to='${target.room}/${nick}'><x xmlns='http://jabber.org/protocol/muc'><history maxstanzas='0'/></x></presence>` },
    ];
    let next = 0;
    let step = handshake[0]!.step;
    let closing = false;
    const fail = (reason: string) => {
      if (step === "joined") handlers.onError(reason);
      else reject(new Error(`XMPP ${nick} at ${step}: ${reason}`));
      socket.destroy();
    };
    const session: XmppSession = {
      say: (body) => socket.write(`<message to='${target.room}' type='groupchat'><body>${body}</body></message>`),
      close: () => {
        closing = true;
        socket.destroy();
      },
    };
    socket.on("connect", () => socket.write(STREAM_OPEN(domain)));
    socket.on("error", (err) => !closing && fail(String(err)));
    socket.on("close", () => !closing && fail("connection closed"));
    socket.on("data", (chunk: string) => {
      const at = performance.timeOrigin + performance.now();
      buffered += chunk;
      if (step === "joined") {
        // Only whole stanzas go on; the rest waits for the next chunk.
        const end = buffered.lastIndexOf("</message>");
        if (end < 0) return;
        const whole = buffered.slice(0, end + "</message>".length);
        buffered = buffered.slice(end + "</message>".length);
        handlers.onMessages(whole, at);
        return;
      }
      if (buffered.includes("<failure") || buffered.includes("<stream:error")) return fail(buffered.slice(0, 300));
      const waiting = handshake[next];
      if (waiting && buffered.includes(waiting.awaits)) {
        buffered = "";
        step = handshake[++next]?.step ?? "join";
        socket.write(waiting.then);
      } else if (!waiting && buffered.includes("code='110'")) {
        // Anything after the confirming presence is the room's traffic.
        const cut = buffered.indexOf("</presence>", buffered.indexOf("code='110'"));
        buffered = cut < 0 ? "" : buffered.slice(cut + "</presence>".length);
        step = "joined";
        resolve(session);
      }
    });
  });
}

/** Each `fo <index> <epoch ms>` body in a run of message stanzas. */
export function* fanoutBodies(stanzas: string): Generator<{ index: number; sentAt: number }> {
  const body = /<body>fo (\d+) ([\d.]+)<\/body>/g;
  for (let m = body.exec(stanzas); m; m = body.exec(stanzas)) yield { index: Number(m[1]), sentAt: Number(m[2]) };
}
