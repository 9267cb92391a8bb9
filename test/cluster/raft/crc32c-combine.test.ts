import { crc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import { SeededRandom } from "../../../src/cluster/raft/core/random.js";
import { combineCrc32c } from "../../../src/cluster/raft/crc32c-combine.js";

const checksum = (bytes: Uint8Array): number => crc32c(bytes) >>> 0;

describe("combineCrc32c", () => {
  it("gives the checksum of two byte strings joined, for any split of any bytes", () => {
    const random = new SeededRandom(42);
    for (let run = 0; run < 500; run += 1) {
      const whole = new Uint8Array(random.nextInt(600)).map(() => random.nextInt(256));
      const split = random.nextInt(whole.byteLength + 1);
      const first = whole.subarray(0, split);
      const second = whole.subarray(split);
      expect(combineCrc32c(checksum(first), checksum(second), second.byteLength)).toBe(checksum(whole));
    }
  });

  it("joins a chunk of a snapshot's size onto a running checksum as the storage does", () => {
    const chunk = new Uint8Array(1024 * 1024).map((_, position) => (position * 31) & 0xff);
    const running = checksum(new Uint8Array([1, 2, 3]));
    expect(combineCrc32c(running, checksum(chunk), chunk.byteLength)).toBe(crc32c(chunk, running) >>> 0);
  });

  it("leaves a checksum as it is for no bytes, and is associative for lengths beyond 32 bits", () => {
    expect(combineCrc32c(0x12345678, 0, 0)).toBe(0x12345678);
    expect(combineCrc32c(0, checksum(new Uint8Array([9])), 1)).toBe(checksum(new Uint8Array([9])));
    const [a, b, c] = [0x0badf00d, 0xdeadbeef, 0x01234567];
    const [lengthB, lengthC] = [2 ** 33 + 5, 2 ** 31 + 3];
    expect(combineCrc32c(combineCrc32c(a, b, lengthB), c, lengthC)).toBe(
      combineCrc32c(a, combineCrc32c(b, c, lengthC), lengthB + lengthC),
    );
  });

  it("refuses a length that is not a non-negative safe integer", () => {
    expect(() => combineCrc32c(1, 2, -1)).toThrow(/cannot combine/);
    expect(() => combineCrc32c(1, 2, 1.5)).toThrow(/cannot combine/);
  });
});
