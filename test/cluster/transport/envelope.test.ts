import { describe, expect, it } from "vitest";
import { HANDSHAKE_NONCE_BYTES, PROTOCOL_VERSION, parseEnvelope } from "../../../src/cluster/transport/envelope.js";
import { ProtocolError } from "../../../src/cluster/transport/errors.js";

const nonce = new Uint8Array(HANDSHAKE_NONCE_BYTES).fill(1);
const proof = new Uint8Array(32).fill(2);

describe("parseEnvelope", () => {
  it("accepts every well-formed kind", () => {
    expect(
      parseEnvelope({ kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId: "production", nonce }),
    ).toEqual({ kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId: "production", nonce });
    expect(
      parseEnvelope({
        kind: "authenticate",
        protocolVersion: PROTOCOL_VERSION,
        clusterId: "production",
        role: "node",
        nodeId: 2,
        nonce,
        proof,
      }),
    ).toMatchObject({ kind: "authenticate", role: "node", nodeId: 2 });
    const client = parseEnvelope({
      kind: "authenticate",
      protocolVersion: PROTOCOL_VERSION,
      clusterId: "0a1b2c3d4e5f6071",
      role: "client",
      nonce,
      proof,
    });
    expect(client).toMatchObject({ kind: "authenticate", role: "client" });
    expect("nodeId" in client).toBe(false);
    expect(parseEnvelope({ kind: "accepted", nodeId: 0, proof })).toEqual({ kind: "accepted", nodeId: 0, proof });
    expect(parseEnvelope({ kind: "refused", reason: "other-cluster" })).toEqual({
      kind: "refused",
      reason: "other-cluster",
    });
    expect(parseEnvelope({ kind: "message", body: [1] })).toEqual({ kind: "message", body: [1] });
    expect(parseEnvelope({ kind: "request", correlationId: 4, body: "x" }).kind).toBe("request");
    expect(parseEnvelope({ kind: "response", correlationId: 4, body: "y" }).kind).toBe("response");
    expect(parseEnvelope({ kind: "error", correlationId: 4, code: "overloaded", message: "busy" }).kind).toBe("error");
  });

  it("reads only the version of a handshake of another protocol version, version 1's included", () => {
    expect(parseEnvelope({ kind: "handshake", protocolVersion: 1, role: "node", nodeId: 2 })).toEqual({
      kind: "foreign-handshake",
      protocolVersion: 1,
    });
    expect(parseEnvelope({ kind: "challenge", protocolVersion: PROTOCOL_VERSION + 1, layout: "unknown" })).toEqual({
      kind: "foreign-handshake",
      protocolVersion: PROTOCOL_VERSION + 1,
    });
  });

  it("rejects malformed envelopes", () => {
    for (const value of [
      null,
      [1],
      { kind: "gossip" },
      { kind: "handshake", role: "node" },
      { kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId: "production", nonce: nonce.subarray(1) },
      { kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId: "bad\u001b[31mid", nonce },
      { kind: "challenge", protocolVersion: PROTOCOL_VERSION, clusterId: "x".repeat(65), nonce },
      { kind: "authenticate", protocolVersion: PROTOCOL_VERSION, clusterId: "c", role: "node", nonce, proof },
      { kind: "authenticate", protocolVersion: PROTOCOL_VERSION, clusterId: "c", role: "admin", nonce, proof },
      { kind: "authenticate", protocolVersion: PROTOCOL_VERSION, clusterId: "c", role: "client", nonce, proof: "x" },
      { kind: "accepted", nodeId: -1, proof },
      { kind: "refused", reason: "because" },
      { kind: "request", correlationId: -1, body: 1 },
      { kind: "error", correlationId: 1, code: "teapot", message: "x" },
    ]) {
      expect(() => parseEnvelope(value), JSON.stringify(value)).toThrow(ProtocolError);
    }
  });
});
