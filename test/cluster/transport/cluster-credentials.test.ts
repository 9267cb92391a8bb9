import { inspect } from "node:util";
import { describe, expect, it } from "vitest";
import { ClusterCredentials } from "../../../src/cluster/transport/cluster-credentials.js";
import { HANDSHAKE_NONCE_BYTES } from "../../../src/cluster/transport/envelope.js";
import {
  acceptorProof,
  connectorProof,
  type HandshakeTranscript,
  verifyAcceptorProof,
  verifyConnectorProof,
} from "../../../src/cluster/transport/handshake.js";
import {
  OTHER_CLUSTER_SECRET,
  otherClusterCredentials,
  TEST_CLUSTER_SECRET,
  testClusterCredentials,
} from "../../support/cluster-secret.js";

const transcript: HandshakeTranscript = {
  clusterId: testClusterCredentials().clusterId,
  acceptorNonce: Buffer.alloc(HANDSHAKE_NONCE_BYTES, 1),
  connectorNonce: Buffer.alloc(HANDSHAKE_NONCE_BYTES, 2),
  connector: { role: "node", nodeId: 1 },
};

describe("ClusterCredentials", () => {
  it("derives one cluster id per secret unless an id is configured", () => {
    const derived = testClusterCredentials().clusterId;
    expect(derived).toMatch(/^[0-9a-f]{16}$/);
    expect(testClusterCredentials().clusterId).toBe(derived);
    expect(otherClusterCredentials().clusterId).not.toBe(derived);
    expect(testClusterCredentials("production").clusterId).toBe("production");
  });

  it("refuses a secret shorter than 32 bytes and a cluster id the setting would not allow", () => {
    expect(() => ClusterCredentials.fromSecret(Buffer.alloc(31, 7))).toThrow(/at least 32 bytes/);
    expect(() => ClusterCredentials.fromSecret(Buffer.from(TEST_CLUSTER_SECRET, "base64"), "")).toThrow(/format/);
    expect(() => ClusterCredentials.fromSecret(Buffer.from(TEST_CLUSTER_SECRET, "base64"), "a\nb")).toThrow(/format/);
  });

  it("never shows its key when printed or serialized", () => {
    const credentials = testClusterCredentials("production");
    const shown = [JSON.stringify({ credentials }), inspect(credentials), String(Object.entries(credentials))];
    for (const text of shown) {
      expect(text).toContain("production");
      for (const secret of [TEST_CLUSTER_SECRET, OTHER_CLUSTER_SECRET]) {
        expect(text).not.toContain(secret);
        expect(text).not.toContain(Buffer.from(secret, "base64").toString("hex"));
      }
      expect(text).not.toMatch(/[0-9a-f]{64}/);
    }
  });
});

describe("handshake proofs", () => {
  it("verify only under the same secret, and only for the transcript they were made for", () => {
    const credentials = testClusterCredentials();
    const proof = connectorProof(credentials, transcript);
    expect(verifyConnectorProof(credentials, transcript, proof)).toBe(true);
    expect(verifyConnectorProof(otherClusterCredentials(), transcript, proof)).toBe(false);
    expect(verifyConnectorProof(credentials, transcript, proof.subarray(1))).toBe(false);
    for (const changed of [
      { ...transcript, acceptorNonce: Buffer.alloc(HANDSHAKE_NONCE_BYTES, 3) },
      { ...transcript, connectorNonce: Buffer.alloc(HANDSHAKE_NONCE_BYTES, 3) },
      { ...transcript, clusterId: "production" },
      { ...transcript, connector: { role: "node", nodeId: 2 } as const },
      { ...transcript, connector: { role: "client" } as const },
    ]) {
      expect(verifyConnectorProof(credentials, changed, proof)).toBe(false);
    }
  });

  it("tell the two sides apart, and bind the accepting side's node id", () => {
    const credentials = testClusterCredentials();
    const accepting = acceptorProof(credentials, transcript, 2);
    expect(accepting.equals(connectorProof(credentials, transcript))).toBe(false);
    expect(verifyConnectorProof(credentials, transcript, accepting)).toBe(false);
    expect(verifyAcceptorProof(credentials, transcript, 2, accepting)).toBe(true);
    expect(verifyAcceptorProof(credentials, transcript, 3, accepting)).toBe(false);
  });
});
