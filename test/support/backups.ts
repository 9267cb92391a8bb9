/** A stand-in for a cluster's management API backup routes, for tests of the platform's backup resources. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { parseJsonExactly, stringifyJsonExactly } from "../../src/json/exact-json.js";
import type { ClusterDirectory } from "../../src/platform/admin/cluster-directory.js";

/** A management backup as the fake cluster answers it. */
export interface FakeBackup {
  /** Answered as its exact digits, as the management API answers ids beyond 2^53 − 1. */
  backupId: bigint;
  state: string;
  failureReason: string | null;
  partitionCount: number;
  details: {
    partitionId: number;
    state: string;
    brokerId: number | null;
    failureReason: string | null;
    checkpointPosition: number | null;
    createdAt: string | null;
    lastUpdated: string | null;
    brokerVersion: string | null;
    sizeBytes: number;
  }[];
}

export function fakeBackup(backupId: bigint, state: string): FakeBackup {
  return {
    backupId,
    state,
    failureReason: state === "FAILED" ? "broker 1 lost its leadership" : null,
    partitionCount: 2,
    details: [1, 2].map((partitionId) => ({
      partitionId,
      state: state === "INCOMPLETE" && partitionId === 2 ? "MISSING" : state,
      brokerId: 0,
      failureReason: null,
      checkpointPosition: 10,
      createdAt: `2026-01-0${partitionId}T00:00:00.000Z`,
      lastUpdated: `2026-01-0${partitionId + 2}T00:00:00.000Z`,
      brokerVersion: "1.0.0",
      sizeBytes: 100,
    })),
  };
}

/**
 * The monitoring answer (`GET /actuator/cluster`) of a cluster of brokers 0 and 1 each hosting partitions 1 to
 * `partitionCount`, with no change pending; `extra` is merged in.
 */
export function fakeClusterStatus(partitionCount = 2, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const at = "2026-01-01T00:00:00.000Z";
  const partitions = Array.from({ length: partitionCount }, (_, index) => ({
    id: index + 1,
    state: "ACTIVE",
    priority: 1,
    config: { exporting: { exporters: [] } },
  }));
  return {
    version: 3,
    brokers: [0, 1].map((id) => ({ id, state: "ACTIVE", version: 1, lastUpdatedAt: at, partitions })),
    lastChange: { id: 2, status: "COMPLETED", startedAt: at, completedAt: at },
    routing: {
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount },
      messageCorrelation: { strategy: "HashMod", partitionCount },
    },
    ...extra,
  };
}

/**
 * A stand-in for a cluster's management API: keeps backups in memory, answers the cluster's configuration
 * (`clusterStatus`), records every request's method, path and bearer token, and can be told to refuse the next
 * request or to hold it.
 */
export class FakeManagementApi {
  readonly backups = new Map<bigint, FakeBackup>();
  /** What `GET /actuator/cluster` answers. */
  clusterStatus: Record<string, unknown> = fakeClusterStatus();
  readonly requests: { method: string; path: string; token: string; body: string }[] = [];
  /** Answers the next request (or the next `times`) with this problem. */
  refuseNext: { status: number; detail: string; times?: number } | undefined;
  /**
   * The highest id a take used, as the backup store marks it: a take at or below it is refused with 409 naming it
   * (`highestUsedBackupId`), even when its backup was deleted since.
   */
  highestTakenBackupId: bigint | undefined;
  /** Answers the next request with a list of this many bytes (a cluster that sends more than it should). */
  oversizedNextBytes: number | undefined;
  /** When set, the next request is answered only once this settles (a call the platform is in the middle of). */
  holdNext: Promise<void> | undefined;
  private server: Server | undefined;
  url = "";

  async start(): Promise<void> {
    this.server = createServer((request, response) => {
      this.handle(request, response).catch(() => response.destroy());
    });
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await new Promise((resolve) => this.server?.close(resolve));
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    let body = "";
    for await (const chunk of request) body += String(chunk);
    const path = request.url ?? "";
    const method = request.method ?? "";
    this.requests.push({ method, path, token: (request.headers.authorization ?? "").replace(/^Bearer /, ""), body });
    const held = this.holdNext;
    this.holdNext = undefined;
    await held;
    const answer = (status: number, value: unknown): void => {
      response.writeHead(status, {
        "content-type": status >= 400 ? "application/problem+json" : "application/json",
      });
      response.end(stringifyJsonExactly(value));
    };
    const problem = (status: number, detail: string) => ({ type: "about:blank", title: "refused", status, detail });
    if (this.oversizedNextBytes !== undefined) {
      const filler = "x".repeat(this.oversizedNextBytes);
      this.oversizedNextBytes = undefined;
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify([filler]));
      return;
    }
    if (this.refuseNext !== undefined) {
      const { status, detail, times = 1 } = this.refuseNext;
      this.refuseNext = times > 1 ? { status, detail, times: times - 1 } : undefined;
      answer(status, problem(status, detail));
      return;
    }
    if (path === "/actuator/cluster" && method === "GET") {
      answer(200, this.clusterStatus);
      return;
    }
    // The platform lists in summary; this stand-in's backups have one part each, which a summary shows whole.
    if ((path === "/actuator/backups" || path === "/actuator/backups?summary=true") && method === "GET") {
      answer(
        200,
        [...this.backups.values()].sort((left, right) => (left.backupId < right.backupId ? 1 : -1)),
      );
      return;
    }
    if (path === "/actuator/backups" && method === "POST") {
      const backupId = BigInt((parseJsonExactly(body) as { backupId: number | bigint }).backupId);
      const used = this.highestTakenBackupId;
      if (used !== undefined && used >= backupId) {
        answer(409, { ...problem(409, `id ${used} is used`), highestUsedBackupId: String(used) });
        return;
      }
      this.highestTakenBackupId = backupId;
      const backup = fakeBackup(backupId, "IN_PROGRESS");
      this.backups.set(backupId, backup);
      answer(202, backup);
      return;
    }
    const match = /^\/actuator\/backups\/(\d+)$/.exec(path);
    const backup = match === null ? undefined : this.backups.get(BigInt(match[1] as string));
    if (backup === undefined) {
      answer(404, problem(404, "no such backup"));
      return;
    }
    if (method === "DELETE") this.backups.delete(backup.backupId);
    answer(200, backup);
  }
}

/** A cluster directory whose clusters (owned as `owners` says) all answer at the fake management API. */
export function fakeClusterDirectory(
  owners: ReadonlyMap<string, string>,
  management: FakeManagementApi,
): ClusterDirectory {
  return {
    async find(organizationId, id) {
      if (owners.get(id) !== organizationId) return undefined;
      return {
        id,
        links: { gateway: "http://127.0.0.1:1", management: management.url, oauth: "http://issuer.test/oauth" },
      };
    },
    async clusterIds(organizationId) {
      return [...owners].filter(([, owner]) => owner === organizationId).map(([id]) => id);
    },
  };
}
