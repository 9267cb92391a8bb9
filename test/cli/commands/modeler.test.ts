import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command, CommanderError } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileTypeOf, formatProjectTable, registerModelerCommands } from "../../../src/cli/commands/modeler.js";
import { CommandFailure, exitCodes, UsageError } from "../../../src/cli/io.js";
import { runCli } from "../../../src/cli/main.js";
import { ApiError } from "../../../src/client/errors.js";
import { ModelerClient } from "../../../src/client/modeler.js";
import { TokenProvider } from "../../../src/client/token-provider.js";
import { openStore } from "../../../src/platform/store/database.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { captureIo } from "../support.js";

const bpmn = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="D" targetNamespace="http://x">
  <bpmn:process id="P" name="Bestellung — 注文" />
</bpmn:definitions>
`;

let platform: TestPlatform;
let directory: string;
let environment: Record<string, string>;
let projectId: string;

beforeAll(async () => {
  platform = await startTestPlatform();
  directory = await mkdtemp(join(tmpdir(), "flowplane-modeler-cli-"));
  environment = {
    SERVICE_CONSOLE_CLIENT_ID: platform.adminClient.clientId,
    SERVICE_CONSOLE_CLIENT_SECRET: platform.adminClient.clientSecret,
    SERVICE_OAUTH_URL: `${platform.url}/oauth/token`,
    SERVICE_CONSOLE_TOKEN_CACHE_FILE: "none",
  };
  const modeler = new ModelerClient({
    baseUrl: `${platform.url}/modeler`,
    tokenProvider: new TokenProvider({
      credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
    }),
  });
  projectId = (await modeler.createProject("CLI project")).id;
  await modeler.createProject("Another project");
});

afterAll(async () => {
  await platform?.close();
  await rm(directory, { recursive: true, force: true });
});

/** Runs `flowplane modeler …` in-process with only the modeler commands registered; returns output and error. */
async function modeler(argv: readonly string[], variables = environment) {
  const { io, output } = captureIo(variables, directory);
  const program = new Command("flowplane")
    .exitOverride()
    .configureOutput({ writeOut: (text) => io.stdout(text), writeErr: (text) => io.stderr(text) });
  registerModelerCommands(program, io);
  let error: unknown;
  try {
    await program.parseAsync(["modeler", ...argv], { from: "user" });
  } catch (caught) {
    error = caught;
  }
  return { ...output, error };
}

describe("flowplane modeler", () => {
  it("lists projects as a table and as JSON", async () => {
    const table = await modeler(["projects", "list"]);
    expect(table.error).toBeUndefined();
    const lines = table.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+NAME\s+UPDATED\s+UPDATED BY$/);
    expect(lines.slice(1).map((line) => line.split(/\s{2,}/)[1])).toEqual(["Another project", "CLI project"]);
    const json = await modeler(["projects", "list", "--json", "--name", "cli"]);
    expect(JSON.parse(json.stdout)).toMatchObject({ total: 1, items: [{ id: projectId, name: "CLI project" }] });
    // An empty answer says so, rather than printing the header alone.
    expect((await modeler(["projects", "list", "--name", "zzz"])).stdout).toBe(
      'no projects whose name contains "zzz"\n',
    );
    expect((await modeler(["projects", "list", "--page", "9"])).stdout).toBe("no projects on page 9 (2 in all)\n");
  });

  it("uploads a file with its type from the extension, creates a milestone and downloads byte for byte", async () => {
    const source = join(directory, "order.bpmn");
    await writeFile(source, bpmn, "utf8");
    const uploaded = await modeler(["upload", source, "--project", projectId, "--json"]);
    expect(uploaded.error).toBeUndefined();
    const file = JSON.parse(uploaded.stdout) as { id: string; type: string; simplePath: string };
    expect(file).toMatchObject({ type: "bpmn", simplePath: "CLI project/order.bpmn" });

    const milestone = await modeler(["milestone", "create", file.id, "first draft"]);
    expect(milestone.stdout).toMatch(/^Created milestone 'first draft' \(id [0-9a-f-]{36}\) of file /);

    const target = join(directory, "downloaded.bpmn");
    const saved = await modeler(["download", file.id, "-o", target]);
    expect(saved.stdout).toBe(`Saved CLI project/order.bpmn (id ${file.id}, bpmn, revision 1) to ${target}.\n`);
    expect((await readFile(target)).equals(Buffer.from(bpmn, "utf8"))).toBe(true);
    const printed = await modeler(["download", file.id]);
    expect(printed.stdout).toBe(bpmn);
    // Into a directory: under the file's own name there.
    const into = await mkdtemp(join(directory, "into-"));
    const intoDirectory = await modeler(["download", file.id, "-o", into]);
    expect(intoDirectory.error).toBeUndefined();
    expect((await readFile(join(into, "order.bpmn"))).equals(Buffer.from(bpmn, "utf8"))).toBe(true);
    const unwritable = await modeler(["download", file.id, "-o", join(directory, "missing", "order.bpmn")]);
    expect(unwritable.error).toBeInstanceOf(CommandFailure);
    expect((unwritable.error as Error).message).toMatch(/^cannot write .*missing\/order\.bpmn: ENOENT/);

    const form = join(directory, "template.json");
    await writeFile(form, '{"name": "REST connector", "properties": []}', "utf8");
    const template = await modeler(["upload", form, "--project", projectId, "--name", "REST", "--json"]);
    expect(JSON.parse(template.stdout)).toMatchObject({ type: "connector_template", name: "REST" });
  });

  it("fails with a usage error for an unknown extension, a missing file and non-UTF-8 content", async () => {
    const unknown = await modeler(["upload", join(directory, "notes.txt"), "--project", projectId]);
    expect(unknown.error).toBeInstanceOf(UsageError);
    expect((unknown.error as Error).message).toContain(".bpmn (bpmn)");
    const missing = await modeler(["upload", join(directory, "missing.bpmn"), "--project", projectId]);
    expect(missing.error).toBeInstanceOf(UsageError);
    const latin1 = join(directory, "latin1.form");
    await writeFile(latin1, Buffer.from([0x7b, 0x22, 0xe4, 0x22, 0x3a, 0x31, 0x7d]));
    expect((await modeler(["upload", latin1, "--project", projectId])).error).toBeInstanceOf(UsageError);
    const noProject = await modeler(["upload", latin1]);
    expect(noProject.error).toBeInstanceOf(CommanderError);
    // A mistyped id is named by its option, before anything is read or sent.
    const source = join(directory, "order.bpmn");
    const badProject = await modeler(["upload", source, "--project", "nope"]);
    expect(badProject.error).toBeInstanceOf(UsageError);
    expect((badProject.error as Error).message).toMatch(/^--project must be an id of the Modeler API/);
    const badFolder = await modeler(["upload", source, "--project", projectId, "--folder", "x"]);
    expect((badFolder.error as Error).message).toMatch(/^--folder must be an id/);
  });

  it("passes the API's problem through for invalid content and unknown files", async () => {
    const broken = join(directory, "broken.dmn");
    await writeFile(broken, "<definitions", "utf8");
    const invalid = await modeler(["upload", broken, "--project", projectId]);
    expect(invalid.error).toBeInstanceOf(ApiError);
    expect((invalid.error as ApiError).status).toBe(400);
    expect((invalid.error as ApiError).detail).toContain("DMN");
    const unknown = await modeler(["download", "00000000-0000-4000-8000-000000000000"]);
    expect((unknown.error as ApiError).status).toBe(404);
    expect(unknown.stdout).toBe("");
  });

  it("maps the file extension to its type", () => {
    expect(fileTypeOf("a/b/Order.BPMN")).toBe("bpmn");
    expect(fileTypeOf("x.dmn")).toBe("dmn");
    expect(fileTypeOf("x.form")).toBe("form");
    expect(fileTypeOf("x.json")).toBe("connector_template");
    expect(() => fileTypeOf("x.xml")).toThrow(UsageError);
  });

  it("aligns the project table", () => {
    const person = { name: "ci", email: "ci@clients.invalid" };
    const table = formatProjectTable([
      { id: "1", name: "A", created: "c", createdBy: person, updated: "u1", updatedBy: person },
      { id: "22", name: "Longer", created: "c", createdBy: person, updated: "u2", updatedBy: person },
    ]);
    expect(table.split("\n")).toEqual([
      "ID  NAME    UPDATED  UPDATED BY",
      "1   A       u1       ci",
      "22  Longer  u2       ci",
    ]);
  });
});

// Exit codes come from `runCli`; these run once `registerModelerCommands` is registered there.
const helpRun = captureIo({}, tmpdir());
await runCli(["--help"], helpRun.io);
const registeredInMain = /^\s+modeler\b/m.test(helpRun.output.stdout);

describe.runIf(registeredInMain)("flowplane modeler through runCli", () => {
  async function cli(argv: readonly string[]) {
    const { io, output } = captureIo(environment, directory);
    return { exitCode: await runCli(argv, io), ...output };
  }

  it("exits 0, 1, 2 and 3 as the other client commands do", async () => {
    expect((await cli(["modeler", "projects", "list"])).exitCode).toBe(exitCodes.ok);
    expect((await cli(["modeler", "download", "00000000-0000-4000-8000-000000000000"])).exitCode).toBe(
      exitCodes.failure,
    );
    expect((await cli(["modeler", "upload", "x.txt", "--project", projectId])).exitCode).toBe(exitCodes.usage);
    const { io, output } = captureIo(
      { ...environment, SERVICE_CONSOLE_CLIENT_SECRET: "wrong-secret-wrong-secret-wrong-secret" },
      directory,
    );
    expect(await runCli(["modeler", "projects", "list"], io)).toBe(exitCodes.authentication);
    expect(output.stderr).toContain("authentication failed");
  });

  it("prints names and messages with control characters as escapes, so they cannot drive the terminal", async () => {
    const hostileName = "Evil\u001b]0;owned\u0007 \u202eproject";
    const modelerClient = new ModelerClient({
      baseUrl: `${platform.url}/modeler`,
      tokenProvider: new TokenProvider({
        credentials: { oauthUrl: `${platform.url}/oauth/token`, ...platform.adminClient },
      }),
    });
    // The API refuses such a name now; a store an earlier version wrote may still hold one.
    const hostileProjectId = (await modelerClient.createProject("renamed below")).id;
    const store = await openStore({ url: "", dataDirectory: platform.dataDirectory });
    try {
      await store.database
        .updateTable("modeler_projects")
        .set({ name: hostileName, name_folded: hostileName.toLowerCase() })
        .where("id", "=", hostileProjectId)
        .execute();
    } finally {
      await store.close();
    }
    const isRaw = (text: string) => ["\u001b", "\u0007", "\u202e"].some((control) => text.includes(control));

    const table = await cli(["modeler", "projects", "list", "--name", "Evil"]);
    expect(table.exitCode).toBe(exitCodes.ok);
    expect(isRaw(table.stdout)).toBe(false);
    expect(table.stdout).toContain("Evil\\u001b]0;owned\\u0007 \\u202eproject");
    const json = await cli(["modeler", "projects", "list", "--name", "Evil", "--json"]);
    expect(isRaw(json.stdout)).toBe(false);
    expect(JSON.parse(json.stdout).items[0].name).toBe(hostileName);

    const source = join(directory, "plain.bpmn");
    await writeFile(source, bpmn, "utf8");
    const uploaded = await cli(["modeler", "upload", source, "--project", hostileProjectId]);
    expect(uploaded.exitCode).toBe(exitCodes.ok);
    expect(uploaded.stdout).toContain("Evil\\u001b]0;owned\\u0007 \\u202eproject/plain.bpmn (id ");
    expect(isRaw(uploaded.stdout)).toBe(false);
    const refusedName = await cli(["modeler", "upload", source, "--project", projectId, "--name", "a\u001b[2Jb.bpmn"]);
    expect(refusedName.exitCode).toBe(exitCodes.failure);
    expect(refusedName.stderr).toContain("name must not contain control characters; it holds U+001B.");
    expect(isRaw(refusedName.stderr)).toBe(false);

    const refused = await cli(["modeler", "upload", join(directory, "x\u001b[2J.txt"), "--project", projectId]);
    expect(refused.exitCode).toBe(exitCodes.usage);
    expect(refused.stderr).toContain("x\\u001b[2J.txt");
    expect(isRaw(refused.stderr)).toBe(false);
  });
});
