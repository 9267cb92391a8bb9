/**
 * The signed-in client: its access tokens, held in memory only (never in localStorage, sessionStorage, cookies or the
 * URL), renewed before they expire. The client-credentials grant has no refresh token, so renewing means asking
 * again with the client's id and secret; they stay in this module's memory for that and are gone on reload.
 */

/** The APIs the console calls, each with its own token audience (`gateway`: clusters' gateways and management). */
export type ApiName = "admin" | "modeler" | "gateway";

/** APIs whose tokens are taken at sign-in; the gateway's only when a page first needs one. */
const signInApis = ["admin", "modeler"] as const;

/** The audiences the platform's index names for each API. */
export type Audiences = Record<ApiName, string>;

/** The client id and secret typed into the sign-in form. */
export interface ClientCredentials {
  clientId: string;
  clientSecret: string;
}

interface Grant {
  accessToken: string;
  scopes: ReadonlySet<string>;
  expiresAtMs: number;
}

/** The answer of the token endpoint, read as far as the console needs it. */
interface TokenAnswer {
  access_token: string;
  expires_in: number;
  scope: string;
}

/** A refused sign-in, with the token endpoint's description of why. */
export class SignInError extends Error {
  override readonly name = "SignInError";
}

/** Largest margin before expiry at which a token is renewed, as the command-line client does. */
const renewalMarginMs = 60_000;
/** Fraction of a token's lifetime used as margin when that is smaller. */
const renewalFraction = 0.1;
/** Wait before trying a failed renewal again, while the current token still holds. */
const renewalRetryMs = 5_000;

/** Asks the token endpoint for one audience; `null` when the client may not have tokens for it. */
async function requestToken(credentials: ClientCredentials, audience: string): Promise<Grant | null> {
  const body = new URLSearchParams({
    grant_type: "client_credentials",
    audience,
    client_id: credentials.clientId,
    client_secret: credentials.clientSecret,
  });
  const startedAtMs = Date.now();
  const response = await fetch("/oauth/token", {
    method: "POST",
    headers: { accept: "application/json" },
    body,
    cache: "no-store",
    credentials: "omit",
  });
  const answer = (await response.json().catch(() => ({}))) as Partial<TokenAnswer> & {
    error?: string;
    error_description?: string;
  };
  if (response.ok && typeof answer.access_token === "string" && typeof answer.expires_in === "number") {
    return {
      accessToken: answer.access_token,
      scopes: new Set((answer.scope ?? "").split(" ").filter((scope) => scope !== "")),
      expiresAtMs: startedAtMs + answer.expires_in * 1000,
    };
  }
  // A client whose scopes do not reach this API is refused with invalid_target: it simply has no such pages.
  if (answer.error === "invalid_target" || answer.error === "invalid_scope") return null;
  throw new SignInError(answer.error_description ?? `The token endpoint answered ${response.status}.`);
}

/** The signed-in client and its tokens. */
export class Session {
  private readonly timers = new Map<ApiName, number>();
  private readonly refused = new Set<ApiName>();
  private readonly preparing = new Map<ApiName, Promise<boolean>>();
  private ended = false;

  private constructor(
    readonly clientId: string,
    private readonly credentials: ClientCredentials,
    private readonly audiences: Audiences,
    private readonly grants: Map<ApiName, Grant>,
    private readonly onEnded: (reason: string) => void,
  ) {
    for (const api of grants.keys()) this.scheduleRenewal(api);
  }

  /** Signs in with a client's credentials, taking a token for every API the client may call. */
  static async signIn(
    credentials: ClientCredentials,
    audiences: Audiences,
    onEnded: (reason: string) => void,
  ): Promise<Session> {
    const grants = new Map<ApiName, Grant>();
    for (const api of signInApis) {
      const grant = await requestToken(credentials, audiences[api]);
      if (grant !== null) grants.set(api, grant);
    }
    if (grants.size === 0) throw new SignInError("This client may not call the Administration or the Modeler API.");
    return new Session(credentials.clientId, { ...credentials }, audiences, grants, onEnded);
  }

  /** Whether the client holds a token for `api`. */
  canCall(api: ApiName): boolean {
    return this.grants.has(api);
  }

  /** Whether any of the client's tokens carries `scope`. */
  holds(scope: string): boolean {
    for (const grant of this.grants.values()) if (grant.scopes.has(scope)) return true;
    return false;
  }

  /** Every scope the client's tokens carry, sorted. */
  scopes(): string[] {
    const all = new Set<string>();
    for (const grant of this.grants.values()) for (const scope of grant.scopes) all.add(scope);
    return [...all].sort();
  }

  /**
   * Takes a token for an API not asked for at sign-in (the gateways'), once; answers whether the client may call it.
   * Pages call this before they show what needs it.
   */
  async prepare(api: ApiName): Promise<boolean> {
    if (this.grants.has(api)) return true;
    if (this.ended || this.refused.has(api)) return false;
    // Pages polling at once share one request to the token endpoint.
    let pending = this.preparing.get(api);
    if (pending === undefined) {
      pending = requestToken(this.credentials, this.audiences[api])
        .then((grant) => {
          if (this.ended) return false;
          if (grant === null) {
            this.refused.add(api);
            return false;
          }
          this.grants.set(api, grant);
          this.scheduleRenewal(api);
          return true;
        })
        .finally(() => this.preparing.delete(api));
      this.preparing.set(api, pending);
    }
    return await pending;
  }

  /** A current access token for `api`, renewed first if the timer could not do it in time (a sleeping laptop). */
  async accessToken(api: ApiName): Promise<string> {
    if (!this.grants.has(api)) await this.prepare(api);
    const grant = this.grants.get(api);
    if (grant === undefined || this.ended) throw new SignInError("Not signed in.");
    if (grant.expiresAtMs > Date.now() + 1_000) return grant.accessToken;
    await this.renew(api);
    const renewed = this.grants.get(api);
    if (renewed === undefined) throw new SignInError("Not signed in.");
    return renewed.accessToken;
  }

  /** Ends the session: forgets tokens and credentials and tells the console why. */
  end(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    for (const timer of this.timers.values()) window.clearTimeout(timer);
    this.timers.clear();
    this.grants.clear();
    this.credentials.clientSecret = "";
    this.onEnded(reason);
  }

  private scheduleRenewal(api: ApiName): void {
    const grant = this.grants.get(api);
    if (grant === undefined) return;
    const lifetimeMs = grant.expiresAtMs - Date.now();
    const marginMs = Math.min(renewalMarginMs, Math.max(0, lifetimeMs) * renewalFraction);
    this.scheduleAttempt(api, Math.max(0, lifetimeMs - marginMs));
  }

  private scheduleAttempt(api: ApiName, delayMs: number): void {
    window.clearTimeout(this.timers.get(api));
    this.timers.set(
      api,
      window.setTimeout(() => {
        this.renew(api).catch(() => undefined);
      }, delayMs),
    );
  }

  private async renew(api: ApiName): Promise<void> {
    if (this.ended) return;
    try {
      const grant = await requestToken(this.credentials, this.audiences[api]);
      if (this.ended) return;
      if (grant === null) {
        this.end("The client may no longer call this API. Sign in again.");
        return;
      }
      this.grants.set(api, grant);
      this.scheduleRenewal(api);
    } catch (error) {
      if (error instanceof SignInError) {
        this.end(`The session could not be renewed: ${error.message}`);
        return;
      }
      // The network failed: try again while the current token still holds, and give up when it has expired.
      const current = this.grants.get(api);
      if (current !== undefined && current.expiresAtMs > Date.now() + renewalRetryMs) {
        this.scheduleAttempt(api, renewalRetryMs);
      } else {
        this.end("The session expired and the platform could not be reached to renew it.");
      }
    }
  }
}
