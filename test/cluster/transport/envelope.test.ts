import { describe, expect, it } from "vitest";
import { parseEnvelope } from "../../../src/cluster/transport/envelope.js";
import { ProtocolError } from "../../../src/cluster/transport/errors.js";

describe("parseEnvelope", () => {
  it("accepts every well-formed kind", () => {
    expect(parseEnvelope({ kind: "handshake", protocolVersion: 1, role: "node", nodeId: 2 })).toEqual({
      kind: "handshake",
      protocolVersion: 1,
      role: "node",
      nodeId: 2,
    });
    expect(parseEnvelope({ kind: "handshake", protocolVersion: 1, role: "client" }).kind).toBe("handshake");
    expect(parseEnvelope({ kind: "message", body: [1] })).toEqual({ kind: "message", body: [1] });
    expect(parseEnvelope({ kind: "request", correlationId: 4, body: "x" }).kind).toBe("request");
    expect(parseEnvelope({ kind: "response", correlationId: 4, body: "y" }).kind).toBe("response");
    expect(parseEnvelope({ kind: "error", correlationId: 4, code: "overloaded", message: "busy" }).kind).toBe("error");
  });

  it("rejects malformed envelopes", () => {
    for (const value of [
      null,
      [1],
      { kind: "gossip" },
      { kind: "handshake", protocolVersion: 1, role: "node" },
      { kind: "request", correlationId: -1, body: 1 },
      { kind: "error", correlationId: 1, code: "teapot", message: "x" },
    ]) {
      expect(() => parseEnvelope(value)).toThrow(ProtocolError);
    }
  });
});
