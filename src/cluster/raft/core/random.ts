/**
 * Randomness for the core comes only through this interface, so a seeded source makes every run reproducible.
 */

/** A source of uniformly distributed integers; the core never calls `Math.random()`. */
export interface RandomSource {
  /** Returns an integer in [0, maxExclusive). */
  nextInt(maxExclusive: number): number;
}

/**
 * Small, fast, seeded pseudo-random generator (sfc32 seeded through splitmix32). Not cryptographic: it exists to
 * randomize election timeouts and to drive deterministic simulations.
 */
export class SeededRandom implements RandomSource {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let state = seed >>> 0;
    const next = (): number => {
      state = (state + 0x9e3779b9) >>> 0;
      let z = state;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    // Discard the first outputs: sfc32 mixes poorly right after seeding.
    for (let round = 0; round < 12; round++) this.nextUint32();
  }

  /** Returns the next raw 32-bit unsigned value. */
  nextUint32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t;
  }

  /** Returns an integer in [0, maxExclusive). */
  nextInt(maxExclusive: number): number {
    if (!Number.isInteger(maxExclusive) || maxExclusive <= 0) {
      throw new Error(`random: maxExclusive must be a positive integer, got ${maxExclusive}`);
    }
    return Math.floor((this.nextUint32() / 0x1_0000_0000) * maxExclusive);
  }

  /** Returns true with the given probability (0..1). */
  chance(probability: number): boolean {
    return this.nextUint32() / 0x1_0000_0000 < probability;
  }

  /** Derives an independent generator, so one consumer's draws do not shift another's. */
  fork(): SeededRandom {
    return new SeededRandom(this.nextUint32());
  }
}
