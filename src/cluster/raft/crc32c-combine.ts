/**
 * The CRC-32C of two byte strings joined, from the CRC-32C of each and the second's length, without reading the
 * bytes again (the method of zlib's `crc32_combine`: multiply the first CRC by x^(8 × length) modulo the
 * polynomial, then add the second). A receiving member's core checksums each chunk once, as it accepts it, and
 * derives the running checksum of the whole snapshot from those, instead of reading every byte a second time.
 */

/** The CRC-32C polynomial (Castagnoli) in reflected bit order. */
const POLYNOMIAL = 0x82f63b78;

/** x^0 in reflected bit order. */
const ONE = 0x80000000;

/** a(x) · b(x) modulo the polynomial, both in reflected bit order. */
function multiplyModPolynomial(a: number, b: number): number {
  let product = 0;
  let factor = b >>> 0;
  // Bounded: one step per bit of `a`, at most 32.
  for (let mask = ONE; mask !== 0 && (a & (mask * 2 - 1)) !== 0; mask >>>= 1) {
    if ((a & mask) !== 0) product ^= factor;
    factor = factor & 1 ? (factor >>> 1) ^ POLYNOMIAL : factor >>> 1;
  }
  return product >>> 0;
}

/** x^(2^k) modulo the polynomial for k = 0..31. */
const POWERS_OF_X = ((): number[] => {
  const powers: number[] = [];
  let power = ONE >>> 1; // x^1
  for (let k = 0; k < 32; k += 1) {
    powers.push(power);
    power = multiplyModPolynomial(power, power);
  }
  return powers;
})();

/** x^(8 × bytes) modulo the polynomial. */
function shiftByBytes(bytes: number): number {
  let result = ONE;
  let k = 3; // x^(2^3) = x^8: one byte
  // Bounded: one step per bit of `bytes` (a safe integer), at most 53.
  for (let remaining = bytes; remaining > 0; remaining = Math.floor(remaining / 2), k += 1) {
    if (remaining % 2 === 1) result = multiplyModPolynomial(POWERS_OF_X[k % 32] as number, result);
  }
  return result;
}

/** CRC-32C of `first` followed by `second`, from `crc32c(first)`, `crc32c(second)` and `second`'s length. */
export function combineCrc32c(firstChecksum: number, secondChecksum: number, secondBytes: number): number {
  if (!Number.isSafeInteger(secondBytes) || secondBytes < 0) {
    throw new Error(`invariant violated: cannot combine a checksum of ${secondBytes} bytes`);
  }
  if (secondBytes === 0) return firstChecksum >>> 0;
  return (multiplyModPolynomial(shiftByBytes(secondBytes), firstChecksum) ^ secondChecksum) >>> 0;
}
