/**
 * The console's check of IP allowlist entries must agree with the platform's, which uses Node's address parser: the
 * same entries accepted, the same refused, with the same message. Both are run on crafted entries and on many
 * generated ones.
 */
import { describe, expect, it } from "vitest";
import { InvalidAddressRangeError, parseAddressRangeEntry } from "../../src/auth/address-ranges.js";
import { addressRangeEntryProblem } from "../../web/src/address-ranges.js";

/** What the platform says about an entry: null when it accepts it, else its message. */
function platformVerdict(entry: string): string | null {
  try {
    parseAddressRangeEntry(entry);
    return null;
  } catch (error) {
    if (error instanceof InvalidAddressRangeError) return error.message;
    throw error;
  }
}

/** A small deterministic generator (mulberry32), so that a failure can be reproduced. */
function randomSource(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let value = Math.imul(state ^ (state >>> 15), 1 | state);
    value = (value + Math.imul(value ^ (value >>> 7), 61 | value)) ^ value;
    return ((value ^ (value >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const crafted = [
  "10.0.0.0/8",
  "192.0.2.7",
  " 192.0.2.0/24 , 2001:db8::/32 ",
  "0.0.0.0/0",
  "::/0",
  "::1",
  "::ffff:192.0.2.7",
  "fe80::1%eth0",
  "fe80::1%eth0/64",
  "1:2:3:4:5:6:7:8",
  "1:2:3:4:5:6:192.0.2.1",
  "1::",
  "::2:3:4:5:6:7:8",
  "",
  " ",
  ",",
  "10.0.0.0/33",
  "2001:db8::/129",
  "10.0.0.0/",
  "10.0.0.0/x",
  "10.0.0.0/0008",
  "10.0.0.0/-1",
  "10.0.0.256",
  "010.0.0.1",
  "1.2.3",
  "1:2:3:4:5:6:7:8:9",
  "1::2::3",
  "::1%",
  "gggg::1",
  "example.com",
  "10.0.0.0/8,",
  `${"1.2.3.4,".repeat(64)}1.2.3.4`,
  `${"1.2.3.4,".repeat(63)}1.2.3.4`,
  "a".repeat(4_097),
  `1.2.3.4/${"9".repeat(70)}`,
];

const seeds = ["192.0.2.0/24", "2001:db8::/32", "::ffff:10.1.2.3/120", "fe80::1%eth0", "1:2:3:4:5:6:7:8/64"];
const alphabet = "0123456789abcdefABCDEFgz:.%/-, x";

describe("IP allowlist entries in the console", () => {
  it("are judged like the platform judges them, message for message, on crafted entries", () => {
    for (const entry of crafted) {
      expect(addressRangeEntryProblem(entry), JSON.stringify(entry)).toBe(platformVerdict(entry));
    }
    // The crafted set holds both kinds, so neither side can agree by refusing or accepting everything.
    expect(crafted.filter((entry) => platformVerdict(entry) === null).length).toBeGreaterThan(10);
    expect(crafted.filter((entry) => platformVerdict(entry) !== null).length).toBeGreaterThan(10);
  });

  it("agree with the platform on many generated entries", () => {
    const random = randomSource(17);
    const pick = (text: string): string => text[Math.floor(random() * text.length)] ?? "";
    let accepted = 0;
    for (let round = 0; round < 50_000; round += 1) {
      let entry: string;
      if (random() < 0.6) {
        // Small edits of valid entries find the edges of the syntax.
        const characters = (seeds[Math.floor(random() * seeds.length)] ?? "").split("");
        for (let edit = 0; edit < 1 + Math.floor(random() * 3); edit += 1) {
          const position = Math.floor(random() * (characters.length + 1));
          const choice = random();
          if (choice < 0.34) characters.splice(position, 0, pick(alphabet));
          else if (choice < 0.67) characters.splice(position, 1);
          else characters[position] = pick(alphabet);
        }
        entry = characters.join("");
      } else {
        const groups = Array.from({ length: Math.floor(random() * 10) }, () =>
          random() < 0.2 ? "" : Math.floor(random() * 70_000).toString(16),
        );
        entry = groups.join(":");
        if (random() < 0.3) entry += `:${[0, 1, 2, 3].map(() => Math.floor(random() * 300)).join(".")}`;
        if (random() < 0.2) entry = `::${entry}`;
        if (random() < 0.3) entry += `/${Math.floor(random() * 140)}`;
      }
      const verdict = platformVerdict(entry);
      if (verdict === null) accepted += 1;
      expect(addressRangeEntryProblem(entry), JSON.stringify(entry)).toBe(verdict);
    }
    expect(accepted).toBeGreaterThan(1_000);
  });
});
