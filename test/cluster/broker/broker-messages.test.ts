import { describe, expect, it } from "vitest";
import { parseBrokerMessage, parseBrokerRequest } from "../../../src/cluster/broker/broker-messages.js";

const heartbeat = { type: "heartbeat", from: 1, to: 0, term: 3, commitIndex: 5, readSequence: 0 };

describe("parseBrokerMessage", () => {
  it("accepts a Raft message addressed from the sending broker to this one", () => {
    expect(parseBrokerMessage({ type: "raft", partitionId: 2, message: heartbeat }, 1, 0)).toEqual({
      type: "raft",
      partitionId: 2,
      message: heartbeat,
    });
  });

  it("refuses Raft messages that would break the core's preconditions", () => {
    expect(parseBrokerMessage({ type: "raft", partitionId: 2, message: heartbeat }, 2, 0)).toContain("came from 2");
    expect(parseBrokerMessage({ type: "raft", partitionId: 2, message: heartbeat }, 1, 5)).toContain("delivered to 5");
    expect(parseBrokerMessage({ type: "raft", partitionId: 2, message: { ...heartbeat, type: "x" } }, 1, 0)).toContain(
      "unknown type",
    );
    expect(parseBrokerMessage({ type: "raft", partitionId: 2, message: { ...heartbeat, term: -1 } }, 1, 0)).toContain(
      "term",
    );
    expect(parseBrokerMessage({ type: "raft", partitionId: "2", message: heartbeat }, 1, 0)).toContain("partition");
    expect(parseBrokerMessage("hello", 1, 0)).toBe("not an object");
    expect(parseBrokerMessage({ type: "other" }, 1, 0)).toContain("unknown message type");
  });

  it("refuses a Raft message whose fields the core could not use, naming the field", () => {
    expect(
      parseBrokerMessage({ type: "raft", partitionId: 2, message: { ...heartbeat, commitIndex: "x" } }, 1, 0),
    ).toBe("malformed raft message (heartbeat: commitIndex is malformed)");
    expect(
      parseBrokerMessage(
        { type: "raft", partitionId: 2, message: { ...heartbeat, term: Number.MAX_SAFE_INTEGER } },
        1,
        0,
      ),
    ).toContain("above the largest term");
  });

  it("quotes at most the start of what a peer sent in the description of a malformed message", () => {
    const huge = "x".repeat(5_000_000);
    const problems = [
      parseBrokerMessage({ type: huge }, 1, 0),
      parseBrokerMessage({ type: "raft", partitionId: 2, message: { ...heartbeat, from: huge } }, 1, 0),
      parseBrokerMessage({ type: "raft", partitionId: 2, message: { ...heartbeat, to: huge } }, 1, 0),
      parseBrokerMessage({ type: { nested: huge } }, 1, 0),
      parseBrokerRequest({ type: huge }),
      parseBrokerRequest({ type: "cluster-change", dryRun: false, command: { kind: huge } }),
    ];
    for (const problem of problems) {
      expect(typeof problem).toBe("string");
      expect((problem as string).length).toBeLessThan(200);
    }
    expect(problems[0]).toBe(`unknown message type "${"x".repeat(64)}"… (5000000 characters)`);
    expect(problems[3]).toBe("unknown message type a value of type object");
  });

  it("accepts gossip with well-formed addresses only", () => {
    const brokers = [{ nodeId: 1, host: "127.0.0.1", port: 26502, incarnation: 5 }];
    expect(parseBrokerMessage({ type: "gossip", configuration: "{}", brokers }, 1, 0)).toEqual({
      type: "gossip",
      configuration: "{}",
      brokers,
    });
    expect(
      parseBrokerMessage({ type: "gossip", configuration: "{}", brokers: [{ ...brokers[0], port: 70_000 }] }, 1, 0),
    ).toContain("bad addresses");
    expect(parseBrokerMessage({ type: "gossip", brokers }, 1, 0)).toContain("without a configuration");
  });

  it("accepts only a sending time that a record could hold as a timestamp", () => {
    const gossip = { type: "gossip", configuration: "{}", brokers: [] };
    expect(parseBrokerMessage({ ...gossip, sentAtMs: 1_790_000_000_000 }, 1, 0)).toEqual({
      ...gossip,
      sentAtMs: 1_790_000_000_000,
    });
    // A fraction or a time before the epoch would have become the leaders' time and every publication's refusal.
    for (const sentAtMs of [1_790_000_000_000.5, -1, Number.MAX_SAFE_INTEGER, "1790000000000", Number.NaN]) {
      expect(parseBrokerMessage({ ...gossip, sentAtMs }, 1, 0)).toContain("gossip sent at");
    }
  });
});

describe("parseBrokerRequest", () => {
  it("accepts the three request types of the protocol", () => {
    expect(parseBrokerRequest({ type: "describe" })).toEqual({ type: "describe" });
    expect(parseBrokerRequest({ type: "get-message", partitionId: 1, key: "2251799813685249" })).toEqual({
      type: "get-message",
      partitionId: 1,
      key: "2251799813685249",
    });
    const message = {
      name: "n",
      correlationKey: "c",
      timeToLiveMs: 5,
      variables: { a: 1 },
      tenantId: "<default>",
      messageId: "m",
    };
    expect(parseBrokerRequest({ type: "publish-message", partitionId: 1, message })).toEqual({
      type: "publish-message",
      partitionId: 1,
      message,
    });
    const { messageId: _messageId, ...withoutId } = message;
    expect(
      parseBrokerRequest({ type: "publish-message", partitionId: 1, message: { ...withoutId, messageId: null } }),
    ).toEqual({
      type: "publish-message",
      partitionId: 1,
      message: withoutId,
    });
  });

  it("reads a backup id as a bigint from either of its encodings, and refuses any other value", () => {
    expect(parseBrokerRequest({ type: "backup-take", backupId: 5 })).toEqual({ type: "backup-take", backupId: 5n });
    expect(parseBrokerRequest({ type: "backup-delete", backupId: 2n ** 63n - 1n })).toEqual({
      type: "backup-delete",
      backupId: 2n ** 63n - 1n,
    });
    for (const backupId of [-1, 1.5, 2 ** 60, 5n, 2n ** 63n, "5", undefined]) {
      expect(parseBrokerRequest({ type: "backup-status", backupId })).toBe(
        "backup-status needs an integer backupId from 0 to 2^63 − 1",
      );
    }
  });

  it("names what is wrong with a malformed request", () => {
    expect(parseBrokerRequest(null)).toContain("not an object");
    expect(parseBrokerRequest({ type: "get-message", partitionId: 1 })).toContain("string key");
    expect(parseBrokerRequest({ type: "get-message", partitionId: 1.5, key: "1" })).toContain("partitionId");
    expect(parseBrokerRequest({ type: "publish-message", partitionId: 1, message: { name: 1 } })).toContain("strings");
    expect(
      parseBrokerRequest({
        type: "publish-message",
        partitionId: 1,
        message: { name: "n", correlationKey: "", tenantId: "t", timeToLiveMs: 1, variables: [] },
      }),
    ).toContain("variables");
    expect(parseBrokerRequest({ type: "drop-tables" })).toContain("unknown request type");
  });
});
