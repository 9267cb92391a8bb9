import { extname } from "node:path";
import { fileURLToPath } from "node:url";
import type { TaskRunner } from "../worker-pool.js";
import { type FileType, validateFileContent } from "./content.js";
import { computeMilestoneDiff, type MilestoneDiffInput, type MilestoneDiffOutcome } from "./milestones/diff.js";

/**
 * The Modeler's CPU-heavy work, run in the platform's worker pool so that it never holds the event loop: parsing
 * and validating file content (BPMN and DMN through their model libraries, forms and templates as JSON) and
 * computing milestone diffs.
 */
export const modelerWorkerTasks = {
  /** Validates content for its file type; fails with the 400 or 413 that names what is wrong. */
  validateFileContent: async (input: { fileType: FileType; content: string }): Promise<void> => {
    await validateFileContent(input.fileType, input.content);
  },
  /** The unified diff of two milestones, or its refusal when they differ too much. */
  diffMilestones: (input: MilestoneDiffInput): MilestoneDiffOutcome => computeMilestoneDiff(input),
};

/** The Modeler's worker tasks. */
export type ModelerWorkerTasks = typeof modelerWorkerTasks;

/** Runs the Modeler's worker tasks: the platform's worker pool, or the calling thread (`inlineTaskRunner`). */
export type ModelerTaskRunner = TaskRunner<ModelerWorkerTasks>;

/** The module serving these tasks in a worker thread: `worker.js` beside this module, `worker.ts` in the sources. */
export const modelerWorkerModule = new URL(`./worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url);
