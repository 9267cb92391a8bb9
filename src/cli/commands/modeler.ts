import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { lstat, open, readFile, rename, stat, unlink } from "node:fs/promises";
import { basename, dirname, extname, join } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import {
  type FileMetadata,
  ModelerClient,
  type ModelerFileType,
  modelerAudience,
  type ProjectMetadata,
} from "../../client/modeler.js";
import { type CliIo, CommandFailure, UsageError } from "../io.js";
import { alignedTable } from "../table.js";
import { printable, printableJson } from "../terminal-text.js";
import { clientEnvironmentHelp, createClientContext } from "./client-context.js";

interface OutputOptions {
  json?: boolean;
  audience?: string;
}

/** File extensions `modeler upload` understands and the file type each stands for. */
export const fileTypeByExtension: Readonly<Record<string, ModelerFileType>> = {
  ".bpmn": "bpmn",
  ".dmn": "dmn",
  ".form": "form",
  ".json": "connector_template",
};

/** The file type of a path, from its extension; a usage error for any other extension. */
export function fileTypeOf(path: string): ModelerFileType {
  const extension = extname(path).toLowerCase();
  const type = fileTypeByExtension[extension];
  if (type === undefined) {
    throw new UsageError(
      `cannot tell the file type of ${path} from its extension; allowed: ${Object.entries(fileTypeByExtension)
        .map(([known, fileType]) => `${known} (${fileType})`)
        .join(", ")}`,
    );
  }
  return type;
}

function createModelerClient(io: CliIo, options: OutputOptions): ModelerClient {
  const { settings, tokenProvider } = createClientContext(io);
  return new ModelerClient({
    baseUrl: settings.modelerUrl,
    tokenProvider,
    audience: options.audience ?? modelerAudience,
  });
}

function parseCount(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 0) throw new InvalidArgumentError("expected a whole number of at least 0");
  return parsed;
}

/** Renders projects as an aligned text table, one project per line. */
export function formatProjectTable(projects: readonly ProjectMetadata[]): string {
  const rows = [
    ["ID", "NAME", "UPDATED", "UPDATED BY"],
    ...projects.map((project) => [project.id, project.name, project.updated, project.updatedBy.name].map(printable)),
  ];
  return alignedTable(rows);
}

/** Reads a local file as UTF-8 text, refusing bytes that are not UTF-8 (they could not be stored byte for byte). */
async function readUtf8(path: string): Promise<string> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw new UsageError(`cannot read ${path}: ${(error as Error).message}`);
  }
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new UsageError(`${path} is not UTF-8 text; the Modeler stores BPMN, DMN and JSON as UTF-8`);
  }
}

/** The id options of the Modeler API are UUIDs: checked here, so that a mistyped one is named by its option. */
function requireId(option: string, value: string): string {
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value)) {
    throw new UsageError(
      `${option} must be an id of the Modeler API (a UUID; flowplane modeler projects list shows them)`,
    );
  }
  return value;
}

/** Where `download --output` writes, and whether it is a directory the server's file name chose the entry of. */
interface OutputTarget {
  path: string;
  intoDirectory: boolean;
}

/**
 * Where `download --output` writes: the path itself, or within a directory the file's own name. The name comes from
 * the server, and anyone who may create files in the project chose it: one that is no plain file name there (a
 * slash, `.` or `..`) is refused rather than written elsewhere, and one starting with "." (`.bashrc`, `.npmrc`) unless
 * `--force` says the user means it.
 */
async function outputTarget(output: string, file: FileMetadata, force: boolean): Promise<OutputTarget> {
  const isDirectory = await stat(output).then(
    (status) => status.isDirectory(),
    () => false,
  );
  if (!isDirectory) return { path: output, intoDirectory: false };
  if (file.name !== basename(file.name) || file.name === "." || file.name === "..") {
    throw new UsageError(`${output} is a directory and the file's name is no plain file name there; give a file path`);
  }
  if (file.name.startsWith(".") && !force) {
    throw new UsageError(
      `the file's name ${JSON.stringify(file.name)} starts with "." (a hidden file, often a tool's configuration); ` +
        "give a file path with -o, or add --force to write it into the directory",
    );
  }
  return { path: join(output, file.name), intoDirectory: true };
}

/** A write the operating system refused: the command fails (exit 1) with its reason, which is no usage error. */
function writeFailure(path: string, error: unknown): CommandFailure {
  return new CommandFailure(printable(`cannot write ${path}: ${(error as Error).message}`));
}

/**
 * Writes a downloaded file into a directory under the name the server gave it: created exclusively and without
 * following a symbolic link at that name (another user may share the directory and plant one), so an existing file
 * is never overwritten unless `force`. With `force` an existing regular file is replaced atomically, as
 * `writeAtomically` does (a failed write leaves it whole); a link or anything but a regular file is still refused.
 */
async function writeIntoDirectory(path: string, content: string, force: boolean): Promise<void> {
  if (force) {
    const existing = await lstat(path).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return undefined;
      throw writeFailure(path, error);
    });
    if (existing?.isSymbolicLink() === true) {
      throw new CommandFailure(`${printable(path)} is a symbolic link; refusing to write through it`);
    }
    if (existing !== undefined && !existing.isFile()) {
      throw new CommandFailure(`${printable(path)} exists and is not a regular file; refusing to replace it`);
    }
    // Renamed over the name, never written through it: a link planted meanwhile is replaced, its target untouched.
    if (existing !== undefined) return await writeAtomically(path, content);
  }
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o666);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") {
      throw new UsageError(`${printable(path)} already exists; give another -o, or add --force to replace it`);
    }
    throw writeFailure(path, error);
  }
  try {
    await handle.writeFile(content, "utf8");
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw writeFailure(path, error);
  }
  await handle.close();
}

/**
 * Writes a downloaded file to the path the user named, atomically: a temporary file beside it, then a rename, so a
 * failed write (a full disk) leaves the earlier file whole, never a truncated one. A file replaced keeps its mode
 * (a private 0600 file stays private); a new one gets the process's default.
 */
async function writeAtomically(path: string, content: string): Promise<void> {
  const temporary = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const existingMode = await stat(path).then(
      (status) => (status.isFile() ? status.mode & 0o7777 : undefined),
      () => undefined,
    );
    const handle = await open(
      temporary,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      existingMode ?? 0o666,
    );
    try {
      // The creation mode passes through the umask; an existing file's mode is set exactly.
      if (existingMode !== undefined) await handle.chmod(existingMode);
      await handle.writeFile(content, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, path);
  } catch (error) {
    await unlink(temporary).catch(() => undefined);
    throw writeFailure(path, error);
  }
}

function describeFile(file: FileMetadata): string {
  return printable(`${file.simplePath} (id ${file.id}, ${file.type}, revision ${file.revision})`);
}

/**
 * Registers `flowplane modeler projects list | upload | download | milestone create`, which work with the Modeler
 * API (scopes modeler:read for listing and downloading, modeler:create for uploading and creating milestones).
 */
export function registerModelerCommands(program: Command, io: CliIo): void {
  const modeler = program
    .command("modeler")
    .description("Work with Modeler projects, files and milestones (Modeler API).")
    .addHelpText(
      "after",
      `${clientEnvironmentHelp}\n  SERVICE_MODELER_URL               Modeler API (default: derived like SERVICE_ADMIN_URL, with /modeler)`,
    );

  modeler
    .command("projects")
    .description("Projects of the organization.")
    .command("list")
    .description("List projects, by name.")
    .option("--name <text>", "only projects whose name contains this text (ignoring case)")
    .option("--page <number>", "page to show, from 0", parseCount, 0)
    .option("--size <number>", "projects per page (at most 50)", parseCount, 50)
    .option("--json", "print the page as JSON ({items, total})")
    .option("--audience <audience>", "audience of the Modeler API", modelerAudience)
    .action(async (options: OutputOptions & { name?: string; page: number; size: number }) => {
      if (options.size > 50) throw new UsageError("--size is at most 50");
      const page = await createModelerClient(io, options).searchProjects({
        ...(options.name === undefined ? {} : { filter: { name: options.name } }),
        sort: [{ field: "name", direction: "ASC" }],
        page: options.page,
        size: options.size,
      });
      if (options.json === true) {
        io.stdout(`${printableJson(page)}\n`);
        return;
      }
      if (page.items.length === 0) {
        const filter =
          options.name === undefined ? "" : ` whose name contains ${printable(JSON.stringify(options.name))}`;
        io.stdout(
          page.total === 0 ? `no projects${filter}\n` : `no projects on page ${options.page} (${page.total} in all)\n`,
        );
        return;
      }
      io.stdout(`${formatProjectTable(page.items)}\n`);
      const shown = page.items.length;
      if (shown < page.total) {
        io.stdout(`(${shown} of ${page.total} projects; use --page to see more)\n`);
      }
    });

  modeler
    .command("upload")
    .description("Upload a local file as a new Modeler file; its type comes from the extension.")
    .argument("<file>", `local file: ${Object.keys(fileTypeByExtension).join(", ")} (.json is a connector template)`)
    .requiredOption("--project <id>", "project to upload into")
    .option("--folder <id>", "folder of the project to upload into (default: the project's top level)")
    .option("--name <name>", "name of the Modeler file (default: the local file's name)")
    .option("--json", "print the created file's metadata as JSON")
    .option("--audience <audience>", "audience of the Modeler API", modelerAudience)
    .action(async (path: string, options: OutputOptions & { project: string; folder?: string; name?: string }) => {
      const fileType = fileTypeOf(path);
      const projectId = requireId("--project", options.project);
      const folderId = options.folder === undefined ? undefined : requireId("--folder", options.folder);
      const content = await readUtf8(path);
      const created = await createModelerClient(io, options).createFile({
        name: options.name ?? basename(path),
        content,
        fileType,
        projectId,
        ...(folderId === undefined ? {} : { folderId }),
      });
      if (options.json === true) {
        io.stdout(`${printableJson(created)}\n`);
      } else {
        io.stdout(`Uploaded ${describeFile(created)}.\n`);
      }
    });

  modeler
    .command("download")
    .description(
      "Download a Modeler file's content, byte for byte: to a file, into a directory under the file's own name, or to " +
        "standard output when that is no terminal (a pipe or a redirection).",
    )
    .argument("<fileId>", "id of the Modeler file")
    .option(
      "-o, --output <path>",
      "write the content to this file (replaced atomically), or into this directory under the file's name (never " +
        "over an existing file; names starting with '.' refused) (default: standard output, if no terminal)",
    )
    .option(
      "--force",
      "replace an existing file of that name in the -o directory, accept a name starting with '.', or print to a terminal",
    )
    .option("--json", "print metadata and content as JSON instead")
    .option("--audience <audience>", "audience of the Modeler API", modelerAudience)
    .action(async (fileId: string, options: OutputOptions & { output?: string; force?: boolean }) => {
      requireId("<fileId>", fileId);
      if (options.json === true && options.output !== undefined) {
        throw new UsageError("give either --json or --output, not both");
      }
      const force = options.force === true;
      // Content is anyone's text with write access to the project: raw on a terminal, its escape sequences would
      // drive the terminal (BPMN may hold them), so it goes to a terminal only when asked for.
      if (options.json !== true && options.output === undefined && io.stdoutIsTerminal === true && !force) {
        throw new UsageError(
          "standard output is a terminal, and the file's content would reach it unchanged (escape sequences " +
            "included); give -o <file>, pipe it (| less), or add --force",
        );
      }
      const file = await createModelerClient(io, options).getFile(fileId);
      if (options.json === true) {
        io.stdout(`${printableJson(file)}\n`);
        return;
      }
      if (options.output === undefined) {
        io.stdout(file.content);
        return;
      }
      const target = await outputTarget(options.output, file.metadata, force);
      if (target.intoDirectory) {
        await writeIntoDirectory(target.path, file.content, force);
      } else {
        await writeAtomically(target.path, file.content);
      }
      io.stdout(`Saved ${describeFile(file.metadata)} to ${printable(target.path)}.\n`);
    });

  modeler
    .command("milestone")
    .description("Milestones: frozen copies of a file's content.")
    .command("create")
    .description("Freeze a file's current content as a milestone.")
    .argument("<fileId>", "id of the Modeler file")
    .argument("<name>", "name of the milestone")
    .option("--json", "print the milestone's metadata as JSON")
    .option("--audience <audience>", "audience of the Modeler API", modelerAudience)
    .action(async (fileId: string, name: string, options: OutputOptions) => {
      requireId("<fileId>", fileId);
      const milestone = await createModelerClient(io, options).createMilestone(fileId, name);
      if (options.json === true) {
        io.stdout(`${printableJson(milestone)}\n`);
      } else {
        io.stdout(`${printable(`Created milestone '${milestone.name}' (id ${milestone.id}) of file ${fileId}.`)}\n`);
      }
    });
}
