/** Helpers for transport tests: bounded polling instead of sleeps, resource counting for leak checks, raw peers. */
import { randomBytes } from "node:crypto";
import diagnosticsChannel from "node:diagnostics_channel";
import { connect, type Socket } from "node:net";
import type { ClusterCredentials } from "../../../src/cluster/transport/cluster-credentials.js";
import { HANDSHAKE_NONCE_BYTES, type PeerAddress, PROTOCOL_VERSION } from "../../../src/cluster/transport/envelope.js";
import { encodeFrame, FrameDecoder } from "../../../src/cluster/transport/framing.js";
import {
  type ConnectorIdentity,
  connectorProof,
  type HandshakeTranscript,
} from "../../../src/cluster/transport/handshake.js";

/** Polls `condition` until it holds; throws after `attempts` polls so a broken test fails instead of hanging. */
export async function waitFor(condition: () => boolean | Promise<boolean>, description: string, attempts = 500) {
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    if (await condition()) {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`condition never held: ${description}`);
}

/**
 * Counts this process's listening servers and timers. Sockets are left out: test files share a worker process, and
 * one an earlier file left closing (a keep-alive connection of its HTTP client) would count against a baseline that
 * needs none; `trackSockets` follows a test's own sockets instead.
 */
export function serverAndTimerCount(): number {
  return process.getActiveResourcesInfo().filter((name) => name === "TCPServerWrap" || name === "Timeout").length;
}

/** The sockets this process connects or accepts while tracked, from `net`'s diagnostics channels. */
export interface TrackedSockets {
  readonly sockets: readonly Socket[];
  /** Whether every tracked socket is destroyed. */
  allClosed(): boolean;
  /** Stops tracking. */
  stop(): void;
}

/** Starts tracking the sockets this process connects or accepts from now on (see `TrackedSockets`). */
export function trackSockets(): TrackedSockets {
  const sockets: Socket[] = [];
  const record = (message: unknown) => {
    const socket = (message as { socket?: Socket }).socket;
    if (socket !== undefined) sockets.push(socket);
  };
  diagnosticsChannel.subscribe("net.client.socket", record);
  diagnosticsChannel.subscribe("net.server.socket", record);
  return {
    sockets,
    allClosed: () => sockets.every((socket) => socket.destroyed),
    stop() {
      diagnosticsChannel.unsubscribe("net.client.socket", record);
      diagnosticsChannel.unsubscribe("net.server.socket", record);
    },
  };
}

/** Settles a promise into a value or the error it rejected with, so a test can assert on either. */
export async function outcome<T>(promise: Promise<T>): Promise<{ value?: T; error?: unknown }> {
  try {
    return { value: await promise };
  } catch (error) {
    return { error };
  }
}

/**
 * A raw TCP connection to a transport that sends and reads frames by hand, for tests that play a peer the transport
 * must refuse (a foreign cluster, a wrong secret, an old version, an attacker) or a well-behaved one step by step.
 */
export class RawConnection {
  /** Every value received, in order. */
  readonly received: unknown[] = [];
  /** Resolves when the socket has closed, whoever closed it. */
  readonly closed: Promise<void>;
  private readonly decoder = new FrameDecoder({ maxFrameBytes: 1 << 20 });
  private waiters: (() => void)[] = [];

  private constructor(readonly socket: Socket) {
    socket.on("error", () => undefined);
    socket.on("data", (chunk: Buffer) => {
      for (const frame of this.decoder.push(chunk)) this.received.push(frame.value);
      for (const waiter of this.waiters.splice(0)) waiter();
    });
    this.closed = new Promise((resolve) =>
      socket.on("close", () => {
        for (const waiter of this.waiters.splice(0)) waiter();
        resolve();
      }),
    );
  }

  /** Connects to `address`, from `localAddress` when given (any 127.x.y.z address works on Linux loopback). */
  static async open(address: PeerAddress, localAddress?: string): Promise<RawConnection> {
    const socket = connect({
      host: address.host,
      port: address.port,
      ...(localAddress === undefined ? {} : { localAddress }),
    });
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", () => resolve());
      socket.once("error", reject);
    });
    return new RawConnection(socket);
  }

  /** Whether the socket has closed. */
  get isClosed(): boolean {
    return this.socket.destroyed || this.socket.closed;
  }

  /** Waits for the value at position `index` of everything received; throws when the socket closes first. */
  async valueAt(index: number): Promise<Record<string, unknown>> {
    for (let attempt = 0; attempt < 500; attempt += 1) {
      const value = this.received[index];
      if (value !== undefined) return value as Record<string, unknown>;
      if (this.isClosed) throw new Error(`the connection closed before frame ${index} arrived`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 20);
      });
    }
    throw new Error(`frame ${index} never arrived`);
  }

  /** Sends one value as a frame. */
  send(value: unknown): void {
    this.socket.write(encodeFrame(value, 1 << 20));
  }

  /**
   * Plays the connecting side of the handshake: reads the challenge, sends an authentication with `credentials`
   * (with the nonce or proof given in `tamper` instead of its own), and resolves with the accepting side's answer.
   */
  async authenticate(
    credentials: ClusterCredentials,
    identity: ConnectorIdentity,
    tamper: { readonly proof?: Uint8Array; readonly connectorNonce?: Uint8Array } = {},
  ): Promise<Record<string, unknown>> {
    const challenge = await this.valueAt(0);
    const clusterId = credentials.clusterId;
    const transcript: HandshakeTranscript = {
      clusterId,
      acceptorNonce: challenge.nonce as Uint8Array,
      connectorNonce: tamper.connectorNonce ?? randomBytes(HANDSHAKE_NONCE_BYTES),
      connector: identity,
    };
    this.send({
      kind: "authenticate",
      protocolVersion: PROTOCOL_VERSION,
      clusterId,
      ...identity,
      nonce: transcript.connectorNonce,
      proof: tamper.proof ?? connectorProof(credentials, transcript),
    });
    return this.valueAt(1);
  }

  /** Closes the socket. */
  destroy(): void {
    this.socket.destroy();
  }
}
