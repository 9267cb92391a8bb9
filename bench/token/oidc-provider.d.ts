// oidc-provider ships no type declarations; this declares the small part of its surface the benchmark's peer uses.
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  /** An OpenID Provider / OAuth 2.0 authorization server. */
  export default class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    /** The request listener to mount on a Node.js HTTP server. */
    callback(): (request: IncomingMessage, response: ServerResponse) => void;
    on(event: string, listener: (...parameters: unknown[]) => void): this;
  }
}
