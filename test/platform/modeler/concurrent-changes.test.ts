/**
 * Changes of the Modeler's files and folders that overlap (found by a review on 2026-11-30): a file's content update
 * whose validation outlasts a move of its folder to another project, a folder's rename that read the folder before a
 * move committed, and a read whose folder was moved away and deleted between its statements. Each is replayed by
 * pausing one request at the point where it used to go wrong (a slow validation, or a Kysely plugin that holds a
 * query's result back while the other requests run).
 */
import type {
  KyselyPlugin,
  PluginTransformQueryArgs,
  PluginTransformResultArgs,
  QueryResult,
  RootOperationNode,
  UnknownRow,
} from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { FileService } from "../../../src/platform/modeler/files/service.js";
import { FolderService } from "../../../src/platform/modeler/folders/service.js";
import { type ModelerTaskRunner, modelerWorkerTasks } from "../../../src/platform/modeler/worker-tasks.js";
import { inlineTaskRunner } from "../../../src/platform/worker-pool.js";
import { databaseKinds } from "../../support/databases.js";
import { bpmnDocument, type ModelerFixture, openModelerFixture } from "./support.js";

/** A promise and the function that resolves it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}

/** Holds back the first query result whose first row `matches` until `during` has run. */
function pauseAfterRow(matches: (row: Record<string, unknown>) => boolean, during: () => Promise<void>): KyselyPlugin {
  let done = false;
  return {
    transformQuery: (args: PluginTransformQueryArgs): RootOperationNode => args.node,
    async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
      const row = args.result.rows[0] as Record<string, unknown> | undefined;
      if (!done && row !== undefined && matches(row)) {
        done = true;
        await during();
      }
      return args.result;
    },
  };
}

/** Projects A and B of the fixture's organization, and file `x.bpmn` in folder F of project A. */
async function fileInFolderOfFirstProject(fixture: ModelerFixture) {
  const { organizationId, actor } = fixture;
  const { projects, folders, files } = fixture.services;
  const first = await projects.create(organizationId, actor, "A");
  const second = await projects.create(organizationId, actor, "B");
  const folder = await folders.create(organizationId, actor, { name: "F", projectId: first.id });
  const file = await files.create(organizationId, actor, {
    name: "x.bpmn",
    content: bpmnDocument("one"),
    fileType: "bpmn",
    folderId: folder.id,
  });
  return { first, second, folder, file };
}

describe.each(databaseKinds)("overlapping changes of the Modeler's files and folders (%s)", (kind) => {
  let fixture: ModelerFixture | undefined;
  afterEach(async () => {
    await fixture?.close();
    fixture = undefined;
  });

  it("keeps a file whose content update outlasts its folder's move to another project in that project", async () => {
    fixture = await openModelerFixture(kind);
    const { organizationId, actor } = fixture;
    const { folders, files } = fixture.services;
    const { second, folder, file } = await fileInFolderOfFirstProject(fixture);
    // The content's validation takes a while (seconds for a large file, on the worker pool): the move lands meanwhile.
    const validating = gate();
    const validated = gate();
    const inline = inlineTaskRunner(modelerWorkerTasks);
    const slowTasks: ModelerTaskRunner = {
      run: (async (...task: Parameters<ModelerTaskRunner["run"]>) => {
        validating.open();
        await validated.wait;
        return await inline.run(...task);
      }) as ModelerTaskRunner["run"],
      assertCapacity() {},
    };
    const slowFiles = new FileService(fixture.store.database, () => new Date(), slowTasks);
    const update = slowFiles.update(organizationId, actor, file.id, { revision: 1, content: bpmnDocument("two") });
    await validating.wait;
    await folders.update(organizationId, actor, folder.id, { projectId: second.id });
    validated.open();
    expect(await update).toMatchObject({ folderId: folder.id, projectId: second.id, revision: 2 });
    const stored = (await files.get(organizationId, file.id)).metadata;
    expect(stored.projectId).toBe(second.id);
    expect(stored.canonicalPath[0]?.id).toBe(second.id);
  });

  // SQLite runs one transaction at a time on its single connection, so only PostgreSQL interleaves these.
  it.runIf(kind === "postgres")(
    "does not undo a folder's move by a rename that read the folder before it",
    async () => {
      fixture = await openModelerFixture(kind);
      const { organizationId, actor } = fixture;
      const { folders, files } = fixture.services;
      const { second, folder, file } = await fileInFolderOfFirstProject(fixture);
      const plugin = pauseAfterRow(
        (row) => row.id === folder.id && "parent_id" in row,
        async () => {
          await folders.update(organizationId, actor, folder.id, { projectId: second.id });
        },
      );
      const renaming = new FolderService(fixture.store.database.withPlugin(plugin), () => new Date());
      await renaming.update(organizationId, actor, folder.id, { name: "F renamed" });
      const stored = (await folders.get(organizationId, folder.id)).metadata;
      expect({ project: stored.projectId, name: stored.name }).toEqual({ project: second.id, name: "F renamed" });
      expect((await files.get(organizationId, file.id)).metadata.projectId).toBe(second.id);
    },
  );

  it.runIf(kind === "postgres")("closes no cycle by a rename racing with two moves", async () => {
    fixture = await openModelerFixture(kind);
    const { organizationId, actor } = fixture;
    const { projects, folders } = fixture.services;
    const project = await projects.create(organizationId, actor, "A");
    const parent = await folders.create(organizationId, actor, { name: "P", projectId: project.id });
    const child = await folders.create(organizationId, actor, { name: "C", parentId: parent.id });
    const plugin = pauseAfterRow(
      (row) => row.id === child.id && "parent_id" in row,
      async () => {
        await folders.update(organizationId, actor, child.id, { parentId: null });
        await folders.update(organizationId, actor, parent.id, { parentId: child.id });
      },
    );
    const renaming = new FolderService(fixture.store.database.withPlugin(plugin), () => new Date());
    await renaming.update(organizationId, actor, child.id, { name: "C renamed" });
    expect((await folders.get(organizationId, child.id)).metadata.parentId).toBeNull();
    expect((await folders.get(organizationId, parent.id)).metadata.parentId).toBe(child.id);
    expect((await projects.get(organizationId, project.id)).content.folders.map((folder) => folder.id)).toEqual([
      child.id,
    ]);
  });

  it.runIf(kind === "postgres")(
    "answers a read whose file's folder was moved away and deleted meanwhile with 409",
    async () => {
      fixture = await openModelerFixture(kind);
      const { organizationId, actor } = fixture;
      const { folders, files } = fixture.services;
      const { folder, file } = await fileInFolderOfFirstProject(fixture);
      const plugin = pauseAfterRow(
        (row) => row.id === file.id && "content" in row,
        async () => {
          await files.update(organizationId, actor, file.id, { revision: 1, folderId: null });
          await folders.delete(organizationId, folder.id);
        },
      );
      const reading = new FileService(fixture.store.database.withPlugin(plugin), () => new Date());
      await expect(reading.get(organizationId, file.id)).rejects.toMatchObject({ kind: "conflict", status: 409 });
      // Sent again, the read finds the file where it is now.
      expect((await files.get(organizationId, file.id)).metadata.folderId).toBeNull();
    },
  );
});
