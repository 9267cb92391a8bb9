/** Raised when configuration is invalid; `problems` names each bad key, its value and what is allowed. */
export class ConfigurationError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`Invalid configuration:\n  - ${problems.join("\n  - ")}`);
    this.name = "ConfigurationError";
  }
}
