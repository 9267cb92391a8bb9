import { type Static, Type } from "typebox";
import { type ApiClientOptions, ApiTransport } from "./api.js";

/** Schema of the Modeler API's info answer. */
export const modelerInfoSchema = Type.Object({
  version: Type.String(),
  authorizedOrganization: Type.String(),
  createPermission: Type.Boolean(),
  readPermission: Type.Boolean(),
  updatePermission: Type.Boolean(),
  deletePermission: Type.Boolean(),
});

/** The API version, the caller's organization and the caller's four permissions. */
export type ModelerInfo = Static<typeof modelerInfoSchema>;

/** The default audience of the Modeler API. */
export const modelerAudience = "modeler-api";

/** Typed client of the Modeler API (info so far). */
export class ModelerClient {
  private readonly transport: ApiTransport;

  /** Creates a client for the Modeler API at `options.baseUrl` (e.g. `http://localhost:8088/modeler`). */
  constructor(options: ApiClientOptions) {
    this.transport = new ApiTransport(options, modelerAudience);
  }

  /** Reports the API version, the caller's organization and which of create/read/update/delete it may do. */
  async info(): Promise<ModelerInfo> {
    return (await this.transport.sendForJson("GET", "/api/v1/info", modelerInfoSchema)) as ModelerInfo;
  }
}
