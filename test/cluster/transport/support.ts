/** Helpers for transport tests: bounded polling instead of sleeps, and resource counting for leak checks. */

/** Polls `condition` until it holds; throws after `attempts` polls so a broken test fails instead of hanging. */
export async function waitFor(condition: () => boolean | Promise<boolean>, description: string, attempts = 500) {
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    if (await condition()) {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`condition never held: ${description}`);
}

/** Counts the live TCP sockets, servers and timers of this process. */
export function networkResourceCount(): number {
  return process
    .getActiveResourcesInfo()
    .filter((name) => name === "TCPSocketWrap" || name === "TCPServerWrap" || name === "Timeout").length;
}

/** Settles a promise into a value or the error it rejected with, so a test can assert on either. */
export async function outcome<T>(promise: Promise<T>): Promise<{ value?: T; error?: unknown }> {
  try {
    return { value: await promise };
  } catch (error) {
    return { error };
  }
}

/** Waits until no TCP socket of earlier tests is still closing, so a resource baseline means something. */
export async function networkQuiet(): Promise<number> {
  await waitFor(() => !process.getActiveResourcesInfo().includes("TCPSocketWrap"), "earlier sockets closed");
  return networkResourceCount();
}
