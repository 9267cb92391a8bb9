/**
 * The local cluster's secret: generated on the cluster's first start, kept in `<cluster directory>/secret/
 * cluster.secret` (the directory 0700, the file 0600, so other local users can read neither), and reused on every
 * later start. Brokers and the gateway get the file's path in their environment (SERVICE_CLUSTER_SECRET_FILE),
 * never the secret itself: a process's command line is readable by every local user, and an environment is copied
 * into every process a child starts. A broker on another machine joins the local cluster with a copy of the file.
 */
import { existsSync, linkSync, readFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { clusterSecretProblem, generateClusterSecret } from "../../config/cluster-secret.js";
import {
  ownPrivateDirectory,
  restrictFileIfPresent,
  temporaryNameBeside,
  writeSyncedPrivateFile,
} from "../../files/private-files.js";

/** Directory of the secret file within the cluster directory. */
export const CLUSTER_SECRET_DIRECTORY_NAME = "secret";

/** Name of the secret file. */
export const CLUSTER_SECRET_FILE_NAME = "cluster.secret";

/** The local cluster's secret file and whether this call created it. */
export interface LocalClusterSecret {
  readonly file: string;
  readonly created: boolean;
}

/**
 * Returns the local cluster's secret file, creating it with a new random secret on the first start. An existing
 * file is checked (a damaged one is an error naming the file, never silently replaced: brokers on other machines may
 * hold the same secret) and its permissions, and those of its directory, are made owner-only again.
 */
export function ensureLocalClusterSecret(clusterDirectory: string): LocalClusterSecret {
  const directory = join(clusterDirectory, CLUSTER_SECRET_DIRECTORY_NAME);
  ownPrivateDirectory(directory);
  const file = join(directory, CLUSTER_SECRET_FILE_NAME);
  if (existsSync(file)) {
    restrictFileIfPresent(file);
    const problem = clusterSecretProblem(readFileSync(file, "utf8"));
    if (problem !== undefined) {
      throw new Error(
        `the local cluster's secret file ${file} is not valid (${problem}); restore it, or delete it to have a new secret generated (every broker and gateway of the local cluster then uses the new one)`,
      );
    }
    return { file, created: false };
  }
  // Written in full and synced under a temporary name, then linked into place: a crash leaves either no secret file
  // or a complete one, and of two starts racing, the second finds the first one's file (the link fails) and uses it.
  const temporary = temporaryNameBeside(file);
  writeSyncedPrivateFile(temporary, `${generateClusterSecret()}\n`);
  try {
    linkSync(temporary, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    unlinkSync(temporary);
    return ensureLocalClusterSecret(clusterDirectory);
  }
  unlinkSync(temporary);
  return { file, created: true };
}
