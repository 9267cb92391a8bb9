/**
 * Typed client of the backup API on a gateway's management port: take a backup, list them, watch one, delete one.
 * Every call needs a token with the `cluster` scope for the gateway audience.
 */
import { type Static, Type } from "typebox";
import { type ApiClientOptions, ApiTransport } from "./api.js";
import { gatewayAudience } from "./cluster.js";

const nullableString = Type.Union([Type.String(), Type.Null()]);
const nullableInteger = Type.Union([Type.Integer(), Type.Null()]);

/**
 * A backup id as the API answers it: a JSON integer of 0..2^63 − 1, read exactly (a bigint beyond 2^53 − 1, see
 * `sendForExactJson`).
 */
const backupIdSchema = Type.Union([Type.Integer({ minimum: 0 }), Type.BigInt()]);

/** Schema of a backup as the API shows it. */
export const backupSchema = Type.Object(
  {
    backupId: backupIdSchema,
    state: Type.String(),
    failureReason: nullableString,
    partitionCount: Type.Integer(),
    details: Type.Array(
      Type.Object(
        {
          partitionId: Type.Integer(),
          state: Type.String(),
          brokerId: nullableInteger,
          failureReason: nullableString,
          checkpointPosition: nullableInteger,
          createdAt: nullableString,
          lastUpdated: nullableString,
          brokerVersion: nullableString,
          sizeBytes: Type.Integer(),
        },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);

/** A backup and its partitions' parts; its id is exact (a bigint), whatever its size. */
export type Backup = Omit<Static<typeof backupSchema>, "backupId"> & { backupId: bigint };

const backupListSchema = Type.Array(backupSchema);

function exactBackup(answered: Static<typeof backupSchema>): Backup {
  return { ...answered, backupId: BigInt(answered.backupId) };
}

/** See the module comment. */
export class BackupsClient {
  private readonly transport: ApiTransport;

  /** Creates a client for the management port at `options.baseUrl` (e.g. `http://localhost:9600`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, gatewayAudience);
  }

  /** Takes backup `backupId` (above every earlier id); answers once every partition took its checkpoint. */
  async take(backupId: bigint): Promise<Backup> {
    return this.sendForBackup("POST", "/actuator/backups", { backupId });
  }

  /**
   * Every backup, newest first; with `summary`, each with only the parts that carry its earliest creation and latest
   * update, which is all its state, creation and completion need.
   */
  async list(options: { readonly summary?: boolean } = {}): Promise<Backup[]> {
    const path = options.summary === true ? "/actuator/backups?summary=true" : "/actuator/backups";
    const answered = await this.transport.sendForExactJson("GET", path, backupListSchema);
    return (answered as Static<typeof backupListSchema>).map(exactBackup);
  }

  /** One backup with the state of each partition's part. */
  async status(backupId: bigint): Promise<Backup> {
    return this.sendForBackup("GET", `/actuator/backups/${backupId}`);
  }

  /** Deletes a backup from the backup store; answers what it held. */
  async delete(backupId: bigint): Promise<Backup> {
    return this.sendForBackup("DELETE", `/actuator/backups/${backupId}`);
  }

  private async sendForBackup(method: "GET" | "POST" | "DELETE", path: string, body?: unknown): Promise<Backup> {
    const answered = await this.transport.sendForExactJson(method, path, backupSchema, body);
    return exactBackup(answered as Static<typeof backupSchema>);
  }
}
