/**
 * The platform's data directory is held by one process at a time: the platform running on it, or an offline
 * maintenance command (`flowplane store rotate-key`) that must not run beside it.
 */
import { claimDirectory } from "../files/directory-claim.js";

/** The file in the data directory naming the process that holds it. */
export const PLATFORM_PID_FILE_NAME = "platform.pid";

/**
 * Claims the platform's data directory for this process, as `holder` (e.g. "a platform"); throws
 * `DataDirectoryInUseError` naming the process that holds it. Returns the function that releases it.
 */
export async function claimPlatformDataDirectory(dataDirectory: string, holder: string): Promise<() => Promise<void>> {
  return await claimDirectory(dataDirectory, { pidFileName: PLATFORM_PID_FILE_NAME, holder });
}
