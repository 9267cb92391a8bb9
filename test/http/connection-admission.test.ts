/**
 * The choice of the connection that makes room at the cap, on stand-ins for sockets and requests: which phases
 * qualify, by progress rather than age, in which order, and that the work per admission is bounded.
 */
import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { describe, expect, it } from "vitest";
import {
  ConnectionAdmission,
  DEFAULT_ADMISSION_THRESHOLDS,
  MAX_BUSY_EXAMINED,
} from "../../src/http/connection-admission.js";

/** A socket as admission sees it: bytes moved so far, and the answer's bytes its client has not taken. */
interface StandIn {
  name: string;
  bytesRead: number;
  bytesWritten: number;
  writableLength: number;
}

function socket(name: string): StandIn & Socket {
  return { name, bytesRead: 0, bytesWritten: 0, writableLength: 0 } as unknown as StandIn & Socket;
}

function request(complete: boolean): IncomingMessage {
  return { complete } as IncomingMessage;
}

const { minWindowMs, minReceivingBytesPerSecond, minAnsweringBytesPerSecond } = DEFAULT_ADMISSION_THRESHOLDS;

/** The address of the connections of the tests that are not about addresses: one address never exceeds its share. */
const sameAddress = "192.0.2.1";

/** An admission at its cap holding `sockets`, admitted at 0 ms. */
function full(sockets: readonly Socket[]): ConnectionAdmission {
  const admission = new ConnectionAdmission(sockets.length);
  for (const each of sockets) expect(admission.admit(each, 0, sameAddress)).toEqual({ admitted: true, replaced: null });
  return admission;
}

describe("ConnectionAdmission", () => {
  it("closes a new connection that has not sent a whole request head within a second, not earlier", () => {
    const opened = socket("opened");
    const admission = full([opened, socket("second")]);
    expect(admission.admit(socket("early"), minWindowMs - 1, sameAddress)).toEqual({ admitted: false });
    expect(admission.admit(socket("late"), minWindowMs, sameAddress)).toEqual({ admitted: true, replaced: opened });
    expect(admission.size).toBe(2);
  });

  it("closes an upload that moves too few bytes, never one that moves them promptly however long it lasts", () => {
    const prompt = socket("prompt");
    const trickling = socket("trickling");
    const admission = full([prompt, trickling]);
    admission.requestReceived(prompt, request(false), 0);
    admission.requestReceived(trickling, request(false), 0);
    // Ten seconds on: the prompt upload moved a megabyte a second, the other less than the minimum rate.
    prompt.bytesRead = 10 * 1024 * 1024;
    trickling.bytesRead = Math.floor((minReceivingBytesPerSecond * 10) / 2);
    const newcomer = socket("new");
    expect(admission.admit(newcomer, 10_000, sameAddress)).toEqual({ admitted: true, replaced: trickling });
    // Two seconds later the upload still moves promptly, and the newcomer's handler is at work: no room.
    admission.requestReceived(newcomer, request(true), 10_000);
    prompt.bytesRead += 2 * 1024 * 1024;
    expect(admission.admit(socket("next"), 12_000, sameAddress)).toEqual({ admitted: false });
  });

  it("closes a connection whose client leaves its answer unread, also with pipelined requests behind it", () => {
    const reading = socket("reading");
    const unread = socket("unread");
    const admission = full([reading, unread]);
    for (const each of [reading, unread]) {
      admission.requestReceived(each, request(true), 0);
      each.writableLength = 4 * 1024 * 1024;
    }
    // The unread one pipelined a request whose body never comes; the reading one takes 10 MB a second.
    admission.requestReceived(unread, request(false), 0);
    reading.bytesWritten = 20 * 1024 * 1024;
    unread.bytesWritten = minAnsweringBytesPerSecond;
    expect(admission.admit(socket("new"), 2_000, sameAddress)).toEqual({ admitted: true, replaced: unread });
  });

  it("never closes a connection whose handler is at work, nor one answering promptly", () => {
    const working = socket("working");
    const answering = socket("answering");
    const admission = full([working, answering]);
    admission.requestReceived(working, request(true), 0);
    admission.requestReceived(answering, request(true), 0);
    answering.writableLength = 64 * 1024;
    answering.bytesWritten = 10 * 1024 * 1024;
    expect(admission.admit(socket("new"), 60_000, sameAddress)).toEqual({ admitted: false });
  });

  it("prefers a slow request to an unread answer, and an unread answer to an idle keep-alive connection", () => {
    const idle = socket("idle");
    const unread = socket("unread");
    const slow = socket("slow");
    const admission = full([idle, unread, slow]);
    admission.requestReceived(idle, request(true), 0);
    admission.answerEnded(idle, 0);
    admission.requestReceived(unread, request(true), 0);
    unread.writableLength = 1024 * 1024;
    admission.requestReceived(slow, request(false), 0);
    expect(admission.admit(socket("a"), minWindowMs, sameAddress)).toMatchObject({ replaced: slow });
    expect(admission.admit(socket("b"), minWindowMs, sameAddress)).toMatchObject({ replaced: unread });
    expect(admission.admit(socket("c"), minWindowMs, sameAddress)).toMatchObject({ replaced: idle });
  });

  it("closes the keep-alive connection idle longest, however short its pause, whatever is busy in front of it", () => {
    const busy = Array.from({ length: MAX_BUSY_EXAMINED + 10 }, (_, index) => socket(`busy${index}`));
    const first = socket("first idle");
    const second = socket("second idle");
    const admission = full([...busy, first, second]);
    // Busy since before the idle ones: handlers at work, none qualifies.
    for (const each of busy) admission.requestReceived(each, request(true), 0);
    for (const each of [second, first]) admission.requestReceived(each, request(true), 0);
    admission.answerEnded(second, 100);
    admission.answerEnded(first, 200);
    expect(admission.admit(socket("new"), 200, sameAddress)).toEqual({ admitted: true, replaced: second });
    expect(admission.admit(socket("next"), 200, sameAddress)).toEqual({ admitted: true, replaced: first });
  });

  it("looks at a bounded number of busy connections, those busy longest first", () => {
    const busy = Array.from({ length: MAX_BUSY_EXAMINED + 10 }, (_, index) => socket(`busy${index}`));
    const admission = full(busy);
    for (const each of busy) admission.requestReceived(each, request(true), 0);
    // Only the last one leaves its answer unread: it lies beyond those examined.
    const last = busy.at(-1) as StandIn & Socket;
    last.writableLength = 1024 * 1024;
    expect(admission.admit(socket("new"), 60_000, sameAddress)).toEqual({ admitted: false });
  });

  it("forgets closed connections", () => {
    const only = socket("only");
    const admission = full([only]);
    admission.closed(only);
    expect(admission.admit(socket("new"), 0, sameAddress)).toEqual({ admitted: true, replaced: null });
  });

  it("closes the oldest connection of the address holding the most for an address holding two fewer, and no more", () => {
    // Ten connections of one address uploading promptly enough, as a hostile test held a server with.
    const admission = new ConnectionAdmission(10);
    const uploads = Array.from({ length: 10 }, (_, index) => socket(`upload ${index}`));
    for (const upload of uploads) {
      expect(admission.admit(upload, 0, "198.51.100.7")).toEqual({ admitted: true, replaced: null });
      admission.requestReceived(upload, request(false), 0);
    }
    for (const upload of uploads) upload.bytesRead = minReceivingBytesPerSecond * 10;
    // A newcomer of another address takes the oldest upload's place, and its second and third connections too.
    expect(admission.admit(socket("newcomer"), 10_000, "203.0.113.5")).toEqual({
      admitted: true,
      replaced: uploads[0],
    });
    expect(admission.admit(socket("newcomer 2"), 10_000, "203.0.113.5")).toEqual({
      admitted: true,
      replaced: uploads[1],
    });
    // The uploading address may not take a place back: it holds more than the newcomer's address.
    expect(admission.admit(socket("upload again"), 10_000, "198.51.100.7")).toEqual({ admitted: false });
    // Shares even out: at 6 against 4 a newcomer's fifth connection still gets in, at 5 against 5 its sixth does not.
    expect(admission.admit(socket("newcomer 3"), 10_000, "203.0.113.5")).toMatchObject({ replaced: uploads[2] });
    expect(admission.admit(socket("newcomer 4"), 10_000, "203.0.113.5")).toMatchObject({ replaced: uploads[3] });
    expect(admission.admit(socket("newcomer 5"), 10_000, "203.0.113.5")).toMatchObject({ replaced: uploads[4] });
    expect(admission.admit(socket("newcomer 6"), 10_000, "203.0.113.5")).toEqual({ admitted: false });
    expect(admission.size).toBe(10);
  });

  it("forgets an address's connections once they close", () => {
    const admission = new ConnectionAdmission(2);
    const first = socket("first");
    const second = socket("second");
    admission.admit(first, 0, "198.51.100.7");
    admission.admit(second, 0, "198.51.100.7");
    for (const each of [first, second]) admission.requestReceived(each, request(false), 0);
    admission.closed(first);
    admission.closed(second);
    expect(admission.size).toBe(0);
    // Both places are free again for anyone; the closed connections count for no address.
    const third = socket("third");
    const fourth = socket("fourth");
    expect(admission.admit(third, 0, "203.0.113.5")).toEqual({ admitted: true, replaced: null });
    expect(admission.admit(fourth, 0, "203.0.113.5")).toEqual({ admitted: true, replaced: null });
    for (const each of [third, fourth]) admission.requestReceived(each, request(false), 0);
    expect(admission.admit(socket("fifth"), 0, "198.51.100.7")).toMatchObject({ replaced: third });
  });

  it("does not close for a fair share a connection whose handler is at work or whose answer is being sent", () => {
    const admission = new ConnectionAdmission(3);
    const working = socket("working");
    const answering = socket("answering");
    const uploading = socket("uploading");
    for (const each of [working, answering, uploading]) admission.admit(each, 0, "198.51.100.7");
    admission.requestReceived(working, request(true), 0);
    admission.requestReceived(answering, request(true), 0);
    admission.requestReceived(uploading, request(false), 0);
    // Its answer moves promptly: 1 MiB a second.
    answering.writableLength = 1024;
    answering.bytesWritten = 1024 * 1024;
    uploading.bytesRead = 1024 * 1024;
    expect(admission.admit(socket("newcomer"), 1_000, "203.0.113.5")).toEqual({ admitted: true, replaced: uploading });
    expect(admission.admit(socket("next"), 1_000, "203.0.113.6")).toEqual({ admitted: false });
  });
});
