/**
 * Typed client of the backup API on a gateway's management port: take a backup, list them, watch one, delete one.
 * Every call needs a token with the `cluster` scope for the gateway audience.
 */
import { type Static, Type } from "typebox";
import { type ApiClientOptions, ApiTransport } from "./api.js";
import { gatewayAudience } from "./cluster.js";

const nullableString = Type.Union([Type.String(), Type.Null()]);
const nullableInteger = Type.Union([Type.Integer(), Type.Null()]);

/** Schema of a backup as the API shows it. */
export const backupSchema = Type.Object(
  {
    backupId: Type.Integer(),
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

/** A backup and its partitions' parts. */
export type Backup = Static<typeof backupSchema>;

const backupListSchema = Type.Array(backupSchema);

/** See the module comment. */
export class BackupsClient {
  private readonly transport: ApiTransport;

  /** Creates a client for the management port at `options.baseUrl` (e.g. `http://localhost:9600`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, gatewayAudience);
  }

  /** Takes backup `backupId` (above every earlier id); answers once every partition took its checkpoint. */
  async take(backupId: number): Promise<Backup> {
    return (await this.transport.sendForJson("POST", "/actuator/backups", backupSchema, { backupId })) as Backup;
  }

  /** Every backup, newest first. */
  async list(): Promise<Backup[]> {
    return (await this.transport.sendForJson("GET", "/actuator/backups", backupListSchema)) as Backup[];
  }

  /** One backup with the state of each partition's part. */
  async status(backupId: number): Promise<Backup> {
    return (await this.transport.sendForJson("GET", `/actuator/backups/${backupId}`, backupSchema)) as Backup;
  }

  /** Deletes a backup from the backup store; answers what it held. */
  async delete(backupId: number): Promise<Backup> {
    return (await this.transport.sendForJson("DELETE", `/actuator/backups/${backupId}`, backupSchema)) as Backup;
  }
}
