/**
 * The choice of the connection that makes room at the cap, on stand-ins for sockets and requests: which phases
 * qualify, in which order, after which minimum times, and that the work per admission is bounded.
 */
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { describe, expect, it } from "vitest";
import {
  ConnectionAdmission,
  DEFAULT_ADMISSION_TIMES,
  MAX_CANDIDATES_EXAMINED,
} from "../../src/http/connection-admission.js";

/** A socket as admission sees it: `writableLength` is the answer's bytes its client has not taken. */
function socket(name: string, writableLength = 0): Socket {
  return { name, writableLength } as unknown as Socket;
}

function request(complete: boolean): IncomingMessage {
  return { complete } as IncomingMessage;
}

const { minReceivingMs, minStalledMs, minIdleMs } = DEFAULT_ADMISSION_TIMES;

/** An admission at its cap of `capacity` connections, each put in a phase by `setUp`. */
function full(capacity: number, setUp: (admission: ConnectionAdmission, sockets: Socket[]) => void) {
  const admission = new ConnectionAdmission(capacity);
  const sockets = Array.from({ length: capacity }, (_, index) => socket(`s${index}`));
  for (const each of sockets) expect(admission.admit(each, 0)).toEqual({ admitted: true, replaced: null });
  setUp(admission, sockets);
  return { admission, sockets };
}

describe("ConnectionAdmission", () => {
  it("admits while there is room, and closes a new connection that sent nothing for a second to admit another", () => {
    const { admission, sockets } = full(2, () => undefined);
    // Not yet a second: a client on its way is spared, and the newcomer is refused.
    expect(admission.admit(socket("early"), minReceivingMs - 1)).toEqual({ admitted: false });
    expect(admission.admit(socket("late"), minReceivingMs)).toEqual({ admitted: true, replaced: sockets[0] });
    expect(admission.size).toBe(2);
  });

  it("never closes a connection whose request arrived whole and whose answer its client takes", () => {
    const { admission } = full(2, (admission, sockets) => {
      for (const each of sockets) admission.requestReceived(each, request(true), 0);
    });
    expect(admission.admit(socket("new"), 60_000)).toEqual({ admitted: false });
  });

  it("closes one whose body is still arriving a second after its head, but not one receiving a pipelined request", () => {
    const { admission, sockets } = full(2, (admission, sockets) => {
      // s0: a request whole and being answered, then a pipelined one whose body is still arriving.
      admission.requestReceived(sockets[0] as Socket, request(true), 0);
      admission.requestReceived(sockets[0] as Socket, request(false), 0);
      // s1: a keep-alive connection whose next request's head came at 5 s, its body not yet.
      admission.requestReceived(sockets[1] as Socket, request(true), 0);
      admission.answerEnded(sockets[1] as Socket, 1);
      admission.requestReceived(sockets[1] as Socket, request(false), 5_000);
    });
    expect(admission.admit(socket("new"), 5_000 + minReceivingMs - 1)).toEqual({ admitted: false });
    expect(admission.admit(socket("new"), 5_000 + minReceivingMs)).toEqual({ admitted: true, replaced: sockets[1] });
  });

  it("prefers a slow request to an unread answer, and an unread answer to an idle keep-alive connection", () => {
    const stalled = socket("stalled", 64 * 1024);
    const idle = socket("idle");
    const slow = socket("slow");
    const admission = new ConnectionAdmission(3);
    for (const each of [idle, stalled, slow]) admission.admit(each, 0);
    admission.requestReceived(idle, request(true), 0);
    admission.answerEnded(idle, 0);
    admission.requestReceived(stalled, request(true), 0);
    admission.requestReceived(slow, request(false), 0);
    const at = Math.max(minReceivingMs, minStalledMs, minIdleMs);
    expect(admission.admit(socket("a"), at)).toMatchObject({ replaced: slow });
    expect(admission.admit(socket("b"), at)).toMatchObject({ replaced: stalled });
    expect(admission.admit(socket("c"), at)).toMatchObject({ replaced: idle });
  });

  it("closes the keep-alive connection idle longest between requests, however short its pause", () => {
    const { admission, sockets } = full(2, (admission, sockets) => {
      for (const each of sockets) admission.requestReceived(each, request(true), 0);
      admission.answerEnded(sockets[1] as Socket, 100);
      admission.answerEnded(sockets[0] as Socket, 200);
    });
    expect(minIdleMs).toBe(0);
    expect(admission.admit(socket("new"), 200)).toEqual({ admitted: true, replaced: sockets[1] });
    expect(admission.admit(socket("next"), 200)).toEqual({ admitted: true, replaced: sockets[0] });
  });

  it("looks at a bounded number of connections, longest in their phase first", () => {
    const capacity = MAX_CANDIDATES_EXAMINED + 10;
    const { admission } = full(capacity, (admission, sockets) => {
      // All are busy with answers their clients take, and the last one to enter its phase then went idle.
      for (const each of sockets) admission.requestReceived(each, request(true), 0);
      admission.answerEnded(sockets.at(-1) as Socket, 1);
    });
    // The one that qualifies lies beyond the connections examined: the newcomer is refused rather than the whole
    // list walked at every connection of a flood.
    expect(admission.admit(socket("new"), 60_000)).toEqual({ admitted: false });
  });

  it("forgets closed connections", () => {
    const { admission, sockets } = full(1, () => undefined);
    admission.closed(sockets[0] as Socket);
    expect(admission.admit(socket("new"), 0)).toEqual({ admitted: true, replaced: null });
  });
});
