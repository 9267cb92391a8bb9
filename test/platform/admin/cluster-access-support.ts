import { Writable } from "node:stream";
import { type Logger, pino } from "pino";
import type { ClusterDirectory, ClusterSummary } from "../../../src/platform/admin/cluster-directory.js";
import type { ClusterAccessOptions } from "../../../src/platform/platform.js";

/** An in-memory cluster directory that tests fill, and a record of the access policy changes it was told about. */
export interface ClusterAccessFixture {
  /** Pass as `clusterAccess` to the platform. */
  options: ClusterAccessOptions;
  /** Gives `organizationId` a cluster of id `clusterId` and answers it as the directory will. */
  addCluster(organizationId: string, clusterId: string): ClusterSummary;
  /** Cluster ids of every `onAccessPolicyChanged` call, in order. */
  changes: string[];
  /** Makes the next `onAccessPolicyChanged` call fail, as a provisioner that cannot write the policy would. */
  failNextChange(): void;
}

/** The summary the test directory answers for a cluster: made-up addresses derived from its id. */
export function clusterSummary(clusterId: string): ClusterSummary {
  return {
    id: clusterId,
    links: {
      gateway: `http://gateway-${clusterId}.test:8080`,
      management: `http://gateway-${clusterId}.test:9600`,
      oauth: "http://issuer.test/oauth/token",
    },
  };
}

/** Creates an empty directory and a change recorder. */
export function createClusterAccessFixture(): ClusterAccessFixture {
  const clusters = new Map<string, string>();
  const changes: string[] = [];
  let failNext = false;
  const directory: ClusterDirectory = {
    async find(organizationId, clusterId) {
      return clusters.get(clusterId) === organizationId ? clusterSummary(clusterId) : undefined;
    },
    async clusterIds(organizationId) {
      return [...clusters].filter(([, owner]) => owner === organizationId).map(([clusterId]) => clusterId);
    },
  };
  return {
    options: {
      clusters: directory,
      async onAccessPolicyChanged(clusterId) {
        changes.push(clusterId);
        if (failNext) {
          failNext = false;
          throw new Error("the policy file could not be written");
        }
      },
    },
    addCluster(organizationId, clusterId) {
      clusters.set(clusterId, organizationId);
      return clusterSummary(clusterId);
    },
    changes,
    failNextChange() {
      failNext = true;
    },
  };
}

/** A logger at the most verbose level whose lines the test reads back. */
export function captureLogger(): { logger: Logger; lines: () => string } {
  let text = "";
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      text += chunk.toString("utf8");
      callback();
    },
  });
  return { logger: pino({ level: "trace" }, stream), lines: () => text };
}
