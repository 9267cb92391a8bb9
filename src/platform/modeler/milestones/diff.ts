import { createTwoFilesPatch, lineDiff } from "diff";
import { transferResult } from "../../worker-pool.js";

/**
 * Longest time one diff may compute before it is refused as too different. The changed-line limit already bounds
 * the work; this is a second bound, far above what that limit allows, for hardware much slower than expected.
 */
export const diffTimeoutMs = 10_000;

/** What the diff of two milestones needs: both contents and how each side is labelled in the patch. */
export interface MilestoneDiffInput {
  /** Label of the old side (`--- <label>`). */
  fromLabel: string;
  /** Label of the new side (`+++ <label>`). */
  toLabel: string;
  fromContent: string;
  toContent: string;
  /** Text after the old side's label (the milestone's creation instant). */
  fromHeader: string;
  /** Text after the new side's label. */
  toHeader: string;
  /** Largest number of changed lines (removed plus added) the diff may have. */
  maxChangedLines: number;
}

/** A unified diff as UTF-8 bytes, or the refusal of two contents that differ in more lines than the limit. */
export type MilestoneDiffOutcome =
  | { kind: "patch"; bytes: Uint8Array }
  /** `changedLinesAtLeast` is known when the count of differing lines alone exceeded the limit. */
  | { kind: "tooDifferent"; changedLinesAtLeast: number | null };

/**
 * The fewest changed lines (removed plus added) any diff of the two texts can have, computed in linear time: a line
 * that occurs more often on one side than on the other must be removed or added that many times. Lines are the
 * tokens of the diff library's own line diff, so the bound holds for exactly what it compares.
 */
export function changedLinesLowerBound(fromContent: string, toContent: string): number {
  const balance = new Map<string, number>();
  for (const line of lineDiff.removeEmpty(lineDiff.tokenize(fromContent, {}))) {
    balance.set(line, (balance.get(line) ?? 0) + 1);
  }
  for (const line of lineDiff.removeEmpty(lineDiff.tokenize(toContent, {}))) {
    balance.set(line, (balance.get(line) ?? 0) - 1);
  }
  let changedLines = 0;
  for (const count of balance.values()) changedLines += Math.abs(count);
  return changedLines;
}

/**
 * The unified diff from one milestone's content to another's, or its refusal when they differ in more than
 * `maxChangedLines` lines. The diff's work grows with the square of the changed lines, so most refusals are found by
 * counting lines first, in linear time; contents whose lines are merely reordered are refused by the diff itself,
 * which stops once the limit is passed. The patch's bytes are moved, not copied, to the thread that asked.
 */
export function computeMilestoneDiff(input: MilestoneDiffInput): MilestoneDiffOutcome {
  const changedLinesAtLeast = changedLinesLowerBound(input.fromContent, input.toContent);
  if (changedLinesAtLeast > input.maxChangedLines) return { kind: "tooDifferent", changedLinesAtLeast };
  const patch = createTwoFilesPatch(
    input.fromLabel,
    input.toLabel,
    input.fromContent,
    input.toContent,
    input.fromHeader,
    input.toHeader,
    { timeout: diffTimeoutMs, maxEditLength: input.maxChangedLines },
  );
  if (patch === undefined) return { kind: "tooDifferent", changedLinesAtLeast: null };
  const bytes = new TextEncoder().encode(patch);
  return transferResult({ kind: "patch", bytes }, [bytes.buffer]);
}
