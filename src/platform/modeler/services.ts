import type { Kysely } from "kysely";
import type { Clock } from "../../auth/clock.js";
import type { MemberService } from "../admin/members/service.js";
import type { ClientService } from "../issuer/clients.js";
import { type AddressBucketSettings, AddressRateLimiter } from "../issuer/rate-limit.js";
import type { PlatformDatabase } from "../store/schema.js";
import type { SecretsBox } from "../store/secrets-box.js";
import { inlineTaskRunner } from "../worker-pool.js";
import { CollaboratorService } from "./collaborators/service.js";
import { FileService } from "./files/service.js";
import { FolderService } from "./folders/service.js";
import { DiffLinkSigner } from "./milestones/diff-links.js";
import { MilestoneService } from "./milestones/service.js";
import { ProjectService } from "./projects/service.js";
import { type ModelerTaskRunner, modelerWorkerTasks } from "./worker-tasks.js";

/** Everything the Modeler routes call. */
export interface ModelerServices {
  projects: ProjectService;
  folders: FolderService;
  files: FileService;
  milestones: MilestoneService;
  collaborators: CollaboratorService;
  /** Names the API client behind a token in `createdBy` / `updatedBy`. */
  clients: Pick<ClientService, "find">;
  /** Limits requests of diff links per source address: they need no token, and a diff costs work. */
  diffLinkRateLimiter: AddressRateLimiter;
  /** Runs content validation and diffs (the worker pool); routes ask it for capacity before reading large bodies. */
  tasks: ModelerTaskRunner;
}

/** Default limit of diff-link requests per source address. */
export const defaultDiffLinkRateLimit: AddressBucketSettings = { burst: 10, refillPerSecond: 1, blockSeconds: 10 };

/** Options of `createModelerServices`. */
export interface ModelerServicesOptions {
  database: Kysely<PlatformDatabase>;
  /** Seals the diff link key in the database (the store's `secrets`). */
  secrets: SecretsBox;
  members: Pick<MemberService, "isMember">;
  clients: Pick<ClientService, "find">;
  /** Absolute base URL of the Modeler API (e.g. `http://localhost:8088/modeler`), for diff links. */
  baseUrl: string;
  clock: Clock;
  /** Runs content validation and diffs: the platform's worker pool (default: the calling thread). */
  tasks?: ModelerTaskRunner;
  /** Largest number of changed lines a milestone diff may have (default `defaultDiffMaxEditLength`). */
  diffMaxChangedLines?: number;
  /** Memory for computed diffs kept for reuse (default `defaultDiffCacheBytes`). */
  diffCacheBytes?: number;
  /** Limit of diff-link requests per source address (default `defaultDiffLinkRateLimit`). */
  diffLinkRateLimit?: AddressBucketSettings;
}

/** Builds the Modeler services over the platform database (loading or creating the diff link key). */
export async function createModelerServices(options: ModelerServicesOptions): Promise<ModelerServices> {
  const { database, clock } = options;
  const now = () => new Date(clock());
  const tasks = options.tasks ?? inlineTaskRunner(modelerWorkerTasks);
  return {
    projects: new ProjectService(database, now),
    folders: new FolderService(database, now),
    files: new FileService(database, now, tasks),
    milestones: new MilestoneService({
      database,
      diffLinks: await DiffLinkSigner.open(database, options.secrets, clock),
      baseUrl: options.baseUrl,
      now,
      tasks,
      ...(options.diffMaxChangedLines === undefined ? {} : { diffMaxEditLength: options.diffMaxChangedLines }),
      ...(options.diffCacheBytes === undefined ? {} : { diffCacheBytes: options.diffCacheBytes }),
    }),
    collaborators: new CollaboratorService(database, options.members, now),
    clients: options.clients,
    tasks,
    diffLinkRateLimiter: new AddressRateLimiter({
      database,
      settings: options.diffLinkRateLimit ?? defaultDiffLinkRateLimit,
      clock,
      scope: "diff-link",
    }),
  };
}
