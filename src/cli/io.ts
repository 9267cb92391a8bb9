import type pino from "pino";

/** Exit codes of the `flowplane` command. */
export const exitCodes = {
  /** The command did what was asked. */
  ok: 0,
  /** An API or runtime error (the message comes from the problem document's detail). */
  failure: 1,
  /** Wrong usage or invalid configuration. */
  usage: 2,
  /** The client could not authenticate (e.g. `invalid_client`). */
  authentication: 3,
  /** The user interrupted a command that was following something (Ctrl-C, SIGINT): 128 + the signal's number. */
  interrupted: 130,
  /** A command that was following something was asked to stop (SIGTERM): 128 + the signal's number. */
  terminated: 143,
} as const;

/** One of the exit codes of `exitCodes`. */
export type ExitCode = (typeof exitCodes)[keyof typeof exitCodes];

/** Everything a command touches outside itself, so that tests can run the CLI in-process. */
export interface CliIo {
  /** Writes to standard output (text already ends with a newline where one is wanted). */
  stdout(text: string): void;
  /** Writes to standard error. */
  stderr(text: string): void;
  /** The environment variables to read `SERVICE_*` settings from. */
  environment: Readonly<Record<string, string | undefined>>;
  /** The user's home directory, where the default token cache lives. */
  homeDirectory: string;
  /** Aborted when long-running commands (`start`) must shut down, e.g. on Ctrl-C or SIGTERM. */
  shutdownSignal: AbortSignal;
  /** Whether standard output is a terminal (progress lines are then rewritten in place). */
  stdoutIsTerminal?: boolean;
  /** Logger for long-running commands; the platform's own (standard output, configured level) when absent. */
  logger?: pino.Logger | undefined;
}

/**
 * A command that cannot do what was asked because of the state it found (no change to cancel, another change
 * running), not because of how it was called; exits with code 1, as an API's refusal does.
 */
export class CommandFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CommandFailure";
  }
}

/**
 * The user stopped a command that follows something (`--wait`, `--watch`) while what it followed goes on; exits 130
 * after Ctrl-C (143 after SIGTERM), as a shell reports a command a signal ended. The message says what goes on.
 */
export class Interrupted extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Interrupted";
  }
}

/** A usage error found by a command itself (beyond what commander checks); exits with code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}
