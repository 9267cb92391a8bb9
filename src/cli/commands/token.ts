import type { Command } from "commander";
import type { CliIo } from "../io.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createClientContext } from "./client-context.js";

interface TokenOptions {
  audience?: string;
  scope?: string;
  json?: boolean;
}

/** Registers `flowplane token`: prints an access token for the `SERVICE_*` client, reusing cached ones. */
export function registerTokenCommand(program: Command, io: CliIo): void {
  program
    .command("token")
    .description(
      "Print an access token for the client named by the SERVICE_* variables (cached until shortly before it expires).",
    )
    .option(
      "--audience <audience>",
      "the API the token is for (default SERVICE_CONSOLE_OAUTH_AUDIENCE, else admin-api)",
    )
    .option("--scope <scopes>", "space-separated scopes to narrow the token to")
    .option("--json", "print the token with its metadata as JSON")
    .addHelpText("after", clientEnvironmentHelp)
    .action(async (options: TokenOptions) => {
      const { tokenProvider } = createClientContext(io);
      const token = await tokenProvider.getToken({ audience: options.audience, scope: options.scope });
      if (options.json !== true) {
        io.stdout(`${printable(token.accessToken)}\n`);
        return;
      }
      const description = {
        access_token: token.accessToken,
        token_type: token.tokenType,
        expires_in: Math.max(0, Math.floor((token.expiresAtMs - Date.now()) / 1000)),
        expires_at: new Date(token.expiresAtMs).toISOString(),
        issued_at: new Date(token.issuedAtMs).toISOString(),
        scope: token.scope,
        audience: token.audience,
        source: token.source,
      };
      io.stdout(`${printableJson(description)}\n`);
    });
}
