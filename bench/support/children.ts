import type { ChildProcess } from "node:child_process";

/**
 * The child processes of one benchmark run, and the guard that makes the run stop by itself: after `deadlineMs`,
 * on Ctrl-C or SIGTERM, or when the process exits for any reason, every child still running is killed.
 */
export class BenchmarkChildren {
  private readonly children = new Set<ChildProcess>();
  private readonly deadline: NodeJS.Timeout;
  private readonly onSignal = (): void => {
    this.killAll();
    process.exit(130);
  };
  private readonly onExit = (): void => this.killAll();

  constructor(name: string, deadlineMs: number) {
    this.deadline = setTimeout(() => {
      console.error(`bench ${name}: exceeded ${deadlineMs / 1000} s, stopping`);
      this.killAll();
      process.exit(1);
    }, deadlineMs);
    this.deadline.unref();
    process.once("exit", this.onExit);
    process.once("SIGINT", this.onSignal);
    process.once("SIGTERM", this.onSignal);
  }

  /** Remembers `child` until it exits, so the guard can kill it. */
  track(child: ChildProcess): ChildProcess {
    this.children.add(child);
    child.on("exit", () => this.children.delete(child));
    return child;
  }

  /** Kills every child still running. */
  killAll(): void {
    for (const child of this.children) {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
  }

  /** Kills what is left and removes the guard's timer and handlers: the run is over. */
  release(): void {
    this.killAll();
    clearTimeout(this.deadline);
    process.off("exit", this.onExit);
    process.off("SIGINT", this.onSignal);
    process.off("SIGTERM", this.onSignal);
  }
}
