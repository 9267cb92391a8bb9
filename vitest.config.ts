import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * Test files that replace a module with `vi.mock`. A mock applies only to modules loaded after it, so these files need
 * a module registry of their own; every other file shares its worker's loaded modules with the files before it.
 */
const filesWithMockedModules = [
  "test/cluster/broker/partition-replica.test.ts",
  "test/cluster/raft/storage/journal-range-read.test.ts",
  "test/cluster/raft/storage/member-storage-reads.test.ts",
  "test/cluster/raft/storage/snapshot-files-writes.test.ts",
  "test/files/private-files.test.ts",
  "test/platform/console/files.test.ts",
  "test/platform/provisioner/taken-ports.test.ts",
];

/**
 * The chaos run keeps a core busy for tens of seconds, and gets a fresh process too: processor-bound files ran slower
 * in a worker that had run the platform's and console's files before them (a simulation file took 51 s instead of 37).
 */
const chaosFiles = ["test/chaos/**/*.test.ts"];

/**
 * The seeded simulations: pure computation on simulated clocks, networks and disks, with no process, port or timer of
 * their own, so one can run on each core at once without changing what it checks.
 */
const simulationFiles = ["test/simulation/**/*.test.ts"];

const filesInTheirOwnProcess = [...filesWithMockedModules, ...chaosFiles];

export default defineConfig({
  test: {
    // At least two files at once, also on two cores, where vitest's default (a worker per core but one) is one: most
    // files wait on real processes, elections and timers rather than on a core (DEVELOPERS.md, "Checks and CI").
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // Integration tests start real servers and databases; give them room on a 2-core machine.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    reporters: ["default"],
    coverage: { provider: "v8", include: ["src/**"] },
    projects: [
      {
        extends: true,
        test: {
          name: "shared-modules",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, ...filesInTheirOwnProcess, ...simulationFiles],
          // Loading the modules anew for each of some 250 files cost over three minutes of a run (module loading and
          // a new process per file); files here leave no state in modules behind them (no mocks of modules, timers
          // and spies restored after each test).
          isolate: false,
          // One throwaway PostgreSQL server for the whole run, when PostgreSQL is installed, and the console's build.
          // It runs before any file of either project, and only here: each project would run it once more.
          globalSetup: ["test/support/global-setup.ts"],
        },
      },
      {
        extends: true,
        test: { name: "own-process", include: filesInTheirOwnProcess, isolate: true },
      },
      {
        extends: true,
        test: {
          name: "simulations",
          include: simulationFiles,
          isolate: true,
          // A project with its own number of workers must run as a group of its own, after the others.
          maxWorkers: Math.max(2, availableParallelism()),
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
