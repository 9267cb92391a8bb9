import { EventEmitter } from "node:events";
import type { Socket } from "node:net";
import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { FramedConnection } from "../../../src/cluster/transport/framed-connection.js";
import { encodeFrame } from "../../../src/cluster/transport/framing.js";

/** A socket stand-in that records corking and writes, and whose uncork can be made to fail. */
class FakeSocket extends EventEmitter {
  corks = 0;
  written: Buffer[] = [];
  destroyed = false;
  failUncork: Error | null = null;
  writableLength = 0;

  setNoDelay(): void {}
  cork(): void {
    this.corks += 1;
  }
  uncork(): void {
    if (this.failUncork !== null) throw this.failUncork;
    this.corks -= 1;
  }
  write(frame: Buffer): boolean {
    this.written.push(frame);
    return true;
  }
  destroy(): void {
    this.destroyed = true;
  }
}

function connectionOn(socket: FakeSocket, closed: (Error | undefined)[]): FramedConnection {
  return new FramedConnection(() => socket as unknown as Socket, {
    maxFrameBytes: 1024,
    onEnvelope: () => {},
    onClose: (error) => closed.push(error),
  });
}

describe("FramedConnection", () => {
  it("corks once per turn and uncorks at its end", async () => {
    const socket = new FakeSocket();
    const connection = connectionOn(socket, []);
    connection.write(encodeFrame({ kind: "message", body: 1 }, 1024));
    connection.write(encodeFrame({ kind: "message", body: 2 }, 1024));
    expect(socket.corks).toBe(1);
    await nextTurn();
    expect(socket.corks).toBe(0);
    expect(socket.written).toHaveLength(2);
  });

  it("ends the connection when its socket cannot be uncorked, instead of holding its frames for ever", async () => {
    const socket = new FakeSocket();
    const closed: (Error | undefined)[] = [];
    const connection = connectionOn(socket, closed);
    const failure = new Error("uncork failed");
    socket.failUncork = failure;
    connection.write(encodeFrame({ kind: "message", body: 1 }, 1024));
    await nextTurn();
    expect(closed).toEqual([failure]);
    expect(socket.destroyed).toBe(true);
    expect(connection.isClosed).toBe(true);
  });
});
