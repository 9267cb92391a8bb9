import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:net";
import pino, { type Logger } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import type { ClusterTransportOptions, RequestSender } from "../../../src/cluster/transport/cluster-transport.js";
import { ClusterTransport } from "../../../src/cluster/transport/cluster-transport.js";
import { HANDSHAKE_NONCE_BYTES, type PeerAddress, PROTOCOL_VERSION } from "../../../src/cluster/transport/envelope.js";
import { PeerUnreachableError } from "../../../src/cluster/transport/errors.js";
import { encodeFrame, FRAME_HEADER_BYTES, FrameDecoder } from "../../../src/cluster/transport/framing.js";
import { connectorProof, MAX_UNAUTHENTICATED_FRAME_BYTES } from "../../../src/cluster/transport/handshake.js";
import { TransportClient } from "../../../src/cluster/transport/transport-client.js";
import {
  OTHER_CLUSTER_SECRET,
  otherClusterCredentials,
  TEST_CLUSTER_SECRET,
  testClusterCredentials,
} from "../../support/cluster-secret.js";
import { outcome, RawConnection, waitFor } from "./support.js";

type TestMessage = { readonly sequence: number };

const closables: { close(): Promise<void> }[] = [];
const rawConnections: RawConnection[] = [];

afterEach(async () => {
  for (const connection of rawConnections.splice(0)) connection.destroy();
  await Promise.all(closables.splice(0).map((closable) => closable.close()));
});

async function startNode(nodeId: number, overrides: Partial<ClusterTransportOptions> = {}) {
  const transport = new ClusterTransport<TestMessage, unknown, unknown>({
    nodeId,
    host: "127.0.0.1",
    port: 0,
    initialBackoffMs: 10,
    maxBackoffMs: 40,
    connectTimeoutMs: 2_000,
    credentials: testClusterCredentials(),
    ...overrides,
  });
  closables.push(transport);
  const address = await transport.listen();
  return { transport, address };
}

async function openRaw(address: PeerAddress, localAddress?: string): Promise<RawConnection> {
  const connection = await RawConnection.open(address, localAddress);
  rawConnections.push(connection);
  return connection;
}

/** A logger that keeps every line it writes, parsed. */
function capturingLogger(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "debug" }, { write: (line: string) => lines.push(JSON.parse(line)) });
  return { logger, lines };
}

/** Resolves when `promise` does, or throws after `timeoutMs` saying what did not happen. */
async function within<T>(promise: Promise<T>, timeoutMs: number, description: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${timeoutMs} ms: ${description}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Log lines must never hold a secret; proofs and nonces are never logged either. */
function expectNoSecretIn(lines: readonly Record<string, unknown>[]): void {
  const text = JSON.stringify(lines);
  for (const secret of [TEST_CLUSTER_SECRET, OTHER_CLUSTER_SECRET]) {
    expect(text).not.toContain(secret);
    expect(text).not.toContain(Buffer.from(secret, "base64").toString("hex"));
  }
  expect(text).not.toMatch(/"(proof|nonce)"/);
}

describe("cluster handshake", () => {
  it("refuses a peer with a wrong secret: none of its messages or requests arrive", async () => {
    const { logger, lines } = capturingLogger();
    const { transport: member, address } = await startNode(2, {
      credentials: testClusterCredentials("production"),
      logger,
    });
    const received: number[] = [];
    const handled: unknown[] = [];
    member.onMessage((_, message) => received.push(message.sequence));
    member.onRequest(async (_, request) => {
      handled.push(request);
      return "answer";
    });
    const { transport: intruder } = await startNode(1, { credentials: otherClusterCredentials("production") });
    intruder.setPeerAddress(2, address);
    expect(intruder.send(2, { sequence: 1 })).toBe(true);
    const result = await outcome(intruder.request(2, "let me in", { timeoutMs: 5_000 }));
    expect(result.error).toBeInstanceOf(PeerUnreachableError);
    expect((result.error as PeerUnreachableError).message).toMatch(/refused the handshake \(authentication-failed\)/);
    expect((result.error as PeerUnreachableError).requestSent).toBe(false);
    await waitFor(() => member.statistics().handshakes.refused >= 2, "the retried handshake is refused too");
    expect(received).toEqual([]);
    expect(handled).toEqual([]);
    expect(member.statistics().handshakes.authenticated).toBe(0);
    expect(member.statistics().peers.get(1)).toBeUndefined();
    const refusals = lines.filter((line) => line.reason === "authentication-failed");
    // Rate-limited: the link keeps retrying, the member logs the first refusal from that host only.
    expect(refusals).toHaveLength(1);
    expect(refusals[0]?.msg).toMatch(/from 127\.0\.0\.1:\d+ \(node 1\): its proof does not match/);
    expectNoSecretIn(lines);
  });

  it("refuses a peer that announces another cluster, naming both cluster ids in its log", async () => {
    const { logger, lines } = capturingLogger();
    const { transport: member, address } = await startNode(2, { logger });
    const raw = await openRaw(address);
    const answer = await raw.authenticate(otherClusterCredentials(), { role: "node", nodeId: 7 });
    expect(answer).toEqual({ kind: "refused", reason: "other-cluster" });
    await within(raw.closed, 5_000, "the refused connection is closed");
    expect(member.statistics().handshakes).toMatchObject({ refused: 1, authenticated: 0, pending: 0 });
    const ownId = testClusterCredentials().clusterId;
    const otherId = otherClusterCredentials().clusterId;
    expect(ownId).not.toBe(otherId);
    const line = lines.find((candidate) => candidate.reason === "other-cluster");
    expect(line).toMatchObject({ level: 40, remoteClusterId: otherId, clusterId: ownId });
    expect(line?.msg).toContain(`it belongs to cluster "${otherId}", this node to cluster "${ownId}"`);
    expectNoSecretIn(lines);
  });

  it("refuses, on the connecting side, a node that answers for another cluster id, even with the same secret", async () => {
    const { address } = await startNode(2, { credentials: testClusterCredentials("production") });
    const { logger, lines } = capturingLogger();
    const { transport: staging } = await startNode(1, { credentials: testClusterCredentials("staging"), logger });
    staging.setPeerAddress(2, address);
    const result = await outcome(staging.request(2, "x", { timeoutMs: 5_000 }));
    expect(result.error).toBeInstanceOf(PeerUnreachableError);
    expect((result.error as Error).message).toContain(
      'node 2 belongs to cluster "production", this side to cluster "staging"',
    );
    await waitFor(() => lines.some((line) => line.reason === "other-cluster"), "the connecting side logs why");
    expect(lines.filter((line) => line.reason === "other-cluster")).toHaveLength(1);
  });

  it("serves a client holding the secret and refuses a client that does not hold it", async () => {
    const { transport: member, address } = await startNode(3, { credentials: testClusterCredentials("production") });
    const senders: RequestSender[] = [];
    member.onRequest(async (from, request) => {
      senders.push(from);
      return { echo: request };
    });
    const gateway = new TransportClient({ credentials: testClusterCredentials("production") });
    closables.push(gateway);
    expect(await gateway.request(address, "topology?", { timeoutMs: 5_000 })).toEqual({ echo: "topology?" });
    expect(senders.map((sender) => sender.role)).toEqual(["client"]);

    const { logger, lines } = capturingLogger();
    const stranger = new TransportClient({ credentials: otherClusterCredentials("production"), logger });
    closables.push(stranger);
    const result = await outcome(stranger.request(address, "topology?", { timeoutMs: 5_000 }));
    expect(result.error).toBeInstanceOf(PeerUnreachableError);
    expect((result.error as Error).message).toMatch(/refused the handshake \(authentication-failed\)/);
    expect(senders).toHaveLength(1);
    expect(lines.find((line) => line.reason === "authentication-failed")?.msg).toMatch(/cluster handshake failed/);
    expectNoSecretIn(lines);
  });

  it("cuts an unauthenticated connection off at a frame header over the handshake limit", async () => {
    // A long handshake deadline: only the frame limit can end this connection quickly.
    const { transport: member, address } = await startNode(2, { connectTimeoutMs: 60_000 });
    const raw = await openRaw(address);
    const header = Buffer.alloc(FRAME_HEADER_BYTES);
    header.writeUInt32BE(16 * 1024 * 1024 - 1, 0);
    raw.socket.write(header);
    await within(raw.closed, 5_000, "the connection announcing a 16 MiB frame is closed");
    const statistics = member.statistics();
    expect(statistics.protocolErrors).toBe(1);
    expect(statistics.handshakes.pending).toBe(0);
    expect(statistics.handshakes.largestUnauthenticatedReadBytes).toBeLessThanOrEqual(
      FRAME_HEADER_BYTES + MAX_UNAUTHENTICATED_FRAME_BYTES,
    );
  });

  it("closes a connection at once whose first frame announces more than its bytes hold, and logs who sent it", async () => {
    const { logger, lines } = capturingLogger();
    const { transport: member, address } = await startNode(2, { connectTimeoutMs: 60_000, logger });
    const raw = await openRaw(address);
    // An array header of 2^25 elements: decoded as it was, it reserved 268 MB before reading any element.
    raw.socket.write(Buffer.from("00000005dd02000000", "hex"));
    await within(raw.closed, 5_000, "the connection is closed");
    expect(member.statistics().protocolErrors).toBe(1);
    const refusal = lines.find((line) => line.reason === "malformed");
    expect(refusal).toMatchObject({ level: 40, problem: expect.stringContaining("declares more elements") });
    expect(refusal?.msg).toMatch(/refused a connection whose frame could not be read before it authenticated/);
  });

  it("holds at most one handshake frame of a connection that stalls, and closes it at the deadline", async () => {
    const { transport: member, address } = await startNode(2, { connectTimeoutMs: 200 });
    const raw = await openRaw(address);
    // A frame as large as allowed before authentication, all but its last byte, then nothing.
    const frame = encodeFrame({ kind: "authenticate", padding: "x".repeat(990) }, MAX_UNAUTHENTICATED_FRAME_BYTES);
    expect(frame.length).toBeLessThanOrEqual(FRAME_HEADER_BYTES + MAX_UNAUTHENTICATED_FRAME_BYTES);
    raw.socket.write(frame.subarray(0, frame.length - 1));
    await within(raw.closed, 5_000, "the stalled connection is closed at its handshake deadline");
    const { handshakes } = member.statistics();
    expect(handshakes.timedOut).toBe(1);
    expect(handshakes.largestUnauthenticatedReadBytes).toBe(frame.length - 1);
  });

  it("refuses anything but the handshake before authentication", async () => {
    const { transport: member, address } = await startNode(2);
    const handled: unknown[] = [];
    member.onRequest(async (_, request) => {
      handled.push(request);
      return "answer";
    });
    const raw = await openRaw(address);
    await raw.valueAt(0);
    raw.send({ kind: "request", correlationId: 1, body: "no handshake" });
    expect(await raw.valueAt(1)).toEqual({ kind: "refused", reason: "malformed" });
    await within(raw.closed, 5_000, "the connection is closed");
    expect(handled).toEqual([]);
  });

  it("refuses a peer of protocol version 1, saying so in its log", async () => {
    const { logger, lines } = capturingLogger();
    const { address } = await startNode(2, { logger });
    const raw = await openRaw(address);
    raw.send({ kind: "handshake", protocolVersion: 1, role: "node", nodeId: 1 });
    expect((await raw.valueAt(0)).kind).toBe("challenge");
    expect(await raw.valueAt(1)).toEqual({ kind: "refused", reason: "protocol-version" });
    expect(lines.find((line) => line.reason === "protocol-version")?.msg).toContain(
      `it speaks protocol version 1, this node ${PROTOCOL_VERSION}`,
    );
  });

  it("caps unauthenticated connections per address and in all, closing the oldest, while members keep working", async () => {
    const { transport: member, address } = await startNode(2, {
      connectTimeoutMs: 60_000,
      maxUnauthenticatedConnectionsPerAddress: 4,
      maxUnauthenticatedConnections: 6,
    });
    member.onRequest(async () => "still serving");
    const { transport: peer } = await startNode(1);
    peer.setPeerAddress(2, address);
    expect(await peer.request(2, "before", { timeoutMs: 5_000 })).toBe("still serving");

    const fromSecondHost: RawConnection[] = [];
    for (let index = 0; index < 20; index += 1) fromSecondHost.push(await openRaw(address, "127.0.0.2"));
    await waitFor(() => member.statistics().handshakes.evicted === 16, "16 connections of 127.0.0.2 evicted");
    expect(member.statistics().handshakes.pending).toBe(4);
    await waitFor(() => fromSecondHost.slice(0, 16).every((connection) => connection.isClosed), "the 16 oldest closed");
    expect(fromSecondHost.slice(16).some((connection) => connection.isClosed)).toBe(false);

    for (let index = 0; index < 4; index += 1) await openRaw(address, "127.0.0.3");
    await waitFor(() => member.statistics().handshakes.evicted === 18, "the oldest of all evicted for another host");
    expect(member.statistics().handshakes.pending).toBe(6);

    // The established connection is untouched, and a member connecting now still gets in.
    expect(await peer.request(2, "during", { timeoutMs: 5_000 })).toBe("still serving");
    const { transport: newcomer } = await startNode(3);
    newcomer.setPeerAddress(2, address);
    expect(await newcomer.request(2, "joining", { timeoutMs: 5_000 })).toBe("still serving");
    expect(member.statistics().handshakes.authenticated).toBe(2);
    expect(member.statistics().handshakes.pending).toBeLessThanOrEqual(6);
  });

  it("refuses the answer of a server that does not hold the secret, and sends it nothing but the handshake", async () => {
    const received: Record<string, unknown>[] = [];
    const clusterId = testClusterCredentials().clusterId;
    // An impostor that knows the cluster id (anyone who connects learns it) but not the secret.
    const impostor: Server = createServer((socket) => {
      const decoder = new FrameDecoder({ maxFrameBytes: 1 << 20 });
      socket.on("error", () => undefined);
      socket.write(
        encodeFrame({ kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId, nonce: randomBytes(32) }, 1_024),
      );
      socket.on("data", (chunk: Buffer) => {
        for (const frame of decoder.push(chunk)) {
          const envelope = frame.value as Record<string, unknown>;
          received.push(envelope);
          if (envelope.kind === "authenticate") {
            socket.write(encodeFrame({ kind: "accepted", nodeId: 2, proof: randomBytes(32) }, 1_024));
          }
        }
      });
    });
    await new Promise<void>((resolve) => impostor.listen(0, "127.0.0.1", () => resolve()));
    closables.push({ close: () => new Promise<void>((resolve) => impostor.close(() => resolve())) });
    const port = (impostor.address() as { port: number }).port;

    const { logger, lines } = capturingLogger();
    const { transport: member } = await startNode(1, { logger });
    member.setPeerAddress(2, { host: "127.0.0.1", port });
    member.send(2, { sequence: 1 });
    const result = await outcome(member.request(2, "secret business", { timeoutMs: 5_000 }));
    expect(result.error).toBeInstanceOf(PeerUnreachableError);
    expect((result.error as Error).message).toMatch(/node 2 did not prove that it holds this cluster's secret/);
    expect(received.length).toBeGreaterThan(0);
    expect(received.every((envelope) => envelope.kind === "authenticate")).toBe(true);
    expect(lines.filter((line) => line.reason === "authentication-failed")).toHaveLength(1);
    await member.close();

    const client = new TransportClient({ credentials: testClusterCredentials() });
    closables.push(client);
    const clientResult = await outcome(client.request({ host: "127.0.0.1", port }, "x", { timeoutMs: 5_000 }));
    expect((clientResult.error as Error).message).toMatch(/did not prove that it holds this cluster's secret/);
    expect(received.every((envelope) => envelope.kind === "authenticate")).toBe(true);
  });

  it("refuses a proof replayed from another connection", async () => {
    const { transport: member, address } = await startNode(2);
    const credentials = testClusterCredentials();
    const identity = { role: "client" } as const;
    const connectorNonce = randomBytes(HANDSHAKE_NONCE_BYTES);
    const first = await openRaw(address);
    expect((await first.authenticate(credentials, identity, { connectorNonce })).kind).toBe("accepted");
    // What an eavesdropper saw on the first connection: its challenge, the nonce and the proof answering it.
    const seenProof = connectorProof(credentials, {
      clusterId: credentials.clusterId,
      acceptorNonce: (first.received[0] as { nonce: Uint8Array }).nonce,
      connectorNonce,
      connector: identity,
    });
    const second = await openRaw(address);
    expect(await second.authenticate(credentials, identity, { connectorNonce, proof: seenProof })).toEqual({
      kind: "refused",
      reason: "authentication-failed",
    });
    expect(member.statistics().handshakes).toMatchObject({ authenticated: 1, refused: 1 });
  });
});
