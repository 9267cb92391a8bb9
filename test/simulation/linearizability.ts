/**
 * Linearizability checker for a read/write register (one key of the key-value map), in the style of Wing & Gong
 * with Lowe's memoization: a depth-first search for an order of the operations that respects real time (an
 * operation that responded before another was invoked comes first) and register semantics (a read returns the last
 * written value). Writes whose outcome is unknown (the client gave up) have an infinite response time: they may
 * take effect at any point after their invocation, or never.
 */

/** One completed or indeterminate operation on a register. */
export interface RegisterOperation {
  readonly kind: "write" | "read";
  /** The value written, or the value the read returned (null: the initial, absent value). */
  readonly value: string | null;
  readonly invokedAt: number;
  /** `Number.POSITIVE_INFINITY` for a write whose outcome is unknown. */
  readonly respondedAt: number;
  readonly label: string;
}

/** Result of a check. `unknown` means the search budget ran out (not a violation). */
export type LinearizabilityResult =
  | { readonly outcome: "linearizable" }
  | { readonly outcome: "violation"; readonly detail: string }
  | { readonly outcome: "unknown" };

/** Checks one register history, exploring at most `maxSteps` search states. */
export function checkRegister(operations: readonly RegisterOperation[], maxSteps = 200_000): LinearizabilityResult {
  const ops = [...operations].sort((left, right) => left.invokedAt - right.invokedAt);
  const count = ops.length;
  if (count === 0) return { outcome: "linearizable" };
  let required = 0n;
  ops.forEach((op, position) => {
    if (op.respondedAt !== Number.POSITIVE_INFINITY) required |= 1n << BigInt(position);
  });
  const visited = new Set<string>();
  let steps = 0;
  let exhausted = false;

  const search = (done: bigint, value: string | null): boolean => {
    if ((done & required) === required) return true;
    if (++steps > maxSteps) {
      exhausted = true;
      return false;
    }
    const key = `${done.toString(36)}|${value ?? "\u0000"}`;
    if (visited.has(key)) return false;
    visited.add(key);
    let earliestResponse = Number.POSITIVE_INFINITY;
    for (let position = 0; position < count; position++) {
      if ((done >> BigInt(position)) & 1n) continue;
      const op = ops[position];
      if (op && op.respondedAt < earliestResponse) earliestResponse = op.respondedAt;
    }
    for (let position = 0; position < count; position++) {
      const bit = 1n << BigInt(position);
      if (done & bit) continue;
      const op = ops[position];
      if (!op) continue;
      if (op.invokedAt > earliestResponse) break;
      if (op.kind === "write") {
        if (search(done | bit, op.value)) return true;
      } else if (op.value === value) {
        if (search(done | bit, value)) return true;
      }
      if (exhausted) return false;
    }
    return false;
  };

  if (search(0n, null)) return { outcome: "linearizable" };
  if (exhausted) return { outcome: "unknown" };
  const shown = ops
    .slice(0, 40)
    .map((op) => `${op.label} ${op.kind}(${op.value}) [${op.invokedAt}, ${op.respondedAt}]`)
    .join("; ");
  return { outcome: "violation", detail: `no linearization of ${count} operations: ${shown}` };
}
